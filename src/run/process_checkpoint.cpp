#include "src/run/process_checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "src/base/bytes.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/core/sim_checkpoint.h"

namespace atl::run {
namespace {

using core::get_tensor;
using core::put_tensor;
using core::get_tensors;
using core::put_tensors;

// Section "run", the simulator's layout: i64 step, u64 metrics bytes, str config hash, u64 islands.
checkpoint::Section run_section(int64_t step, uint64_t metrics_bytes, const std::string& hash, int islands) {
  bytes::ByteWriter w;
  w.i64(step);
  w.u64(metrics_bytes);
  w.str(hash);
  w.u64(static_cast<uint64_t>(islands));
  return {"run", std::move(w).bytes()};
}

Status read_run(const checkpoint::Checkpoint& file, const std::string& what, int64_t& step, uint64_t& metrics_bytes,
                std::string& hash, int& islands) {
  const std::string* run = file.find("run");
  if (run == nullptr) return corrupt(what + ": no section 'run'");
  bytes::Reader r(*run);
  step = r.i64();
  metrics_bytes = r.u64();
  hash = r.str();
  const uint64_t n = r.u64();
  if (!r.done() || n > (1u << 20)) return corrupt(what + ": malformed section 'run'");
  islands = static_cast<int>(n);
  return Status::ok();
}

// Section "server" (a server role's state and latest round, the simulator's layout), in the
// coordinator's running state and in its checkpoints: written with a server role only.
void write_server(std::vector<checkpoint::Section>& out, double clock_s, int64_t round,
                  const transport::OuterServer::State& state) {
  bytes::ByteWriter w;
  core::put_server_state(w, clock_s, round, state);
  out.push_back({"server", std::move(w).bytes()});
}
Status read_server(const checkpoint::Checkpoint& file, const std::string& what, bool& has, int64_t& round,
                   transport::OuterServer::State& state) {
  const std::string* server = file.find("server");
  if (server == nullptr) return Status::ok();
  bytes::Reader r(*server);
  double clock_s = 0;
  has = true;
  core::get_server_state(r, clock_s, round, state);
  return r.done() ? Status::ok() : corrupt(what + ": malformed section 'server'");
}


}  // namespace

std::string checkpoint_mark_key(int64_t step, int island) {
  return "atoll/checkpoint/" + std::to_string(step) + "/island/" + std::to_string(island);
}
std::string checkpoint_done_key(int64_t step) { return "atoll/checkpoint/" + std::to_string(step) + "/done"; }
std::string resume_have_key(int island) { return "atoll/resume/have/" + std::to_string(island); }
std::string finished_key(int island) { return "atoll/finished/" + std::to_string(island); }

std::string checkpoints_root(const config::Config& config) {
  if (!config.checkpoint.dir.empty()) return config.checkpoint.dir;
  return (std::filesystem::path(config.run.out_dir) / config.run.name / "checkpoints").string();
}
std::string island_checkpoint_dir(const config::Config& config, int island) {
  return (std::filesystem::path(checkpoints_root(config)) / ("island-" + std::to_string(island))).string();
}
std::string coordinator_checkpoint_dir(const config::Config& config) {
  return (std::filesystem::path(checkpoints_root(config)) / "coordinator").string();
}

std::string coordinator_state_path(const config::Config& config) {
  return coordinator_checkpoint_dir(config) + "/run-state.ckpt";
}

std::vector<checkpoint::Section> encode_run_state(const CoordinatorRunState& s) {
  std::vector<checkpoint::Section> out;
  out.push_back(run_section(-1, s.metrics_bytes, s.config_hash, s.islands));
  const transport::CoordinatorSnapshot& t = s.snapshot;
  bytes::ByteWriter w;
  w.u64(t.epoch);
  w.u64(t.members.size());
  for (const auto& m : t.members) {
    w.i64(m.id);
    w.u64(m.session);
    w.str(m.endpoint);
    w.str(m.public_key);
  }
  w.u64(t.store.size());
  for (const auto& [key, value] : t.store) {
    w.str(key);
    w.u64(value.size());
    w.raw(value.data(), value.size());
  }
  w.u64(t.records.size());
  for (const auto& r : t.records) {
    w.i64(r.island);
    w.u64(r.session);
    w.u64(r.floor);
    w.i64s({r.above.begin(), r.above.end()});
  }
  w.u64(t.applied.size());
  for (const auto& a : t.applied) {
    w.i64(a.island);
    w.u64(a.session);
    w.i64s({a.ids.begin(), a.ids.end()});
  }
  w.f64(t.server_clock_s);
  out.push_back({"coordinator.state", std::move(w).bytes()});
  if (s.has_server) write_server(out, t.server_clock_s, s.server_round, s.server);
  return out;
}

StatusOr<CoordinatorRunState> decode_run_state(const checkpoint::Checkpoint& file, const std::string& what) {
  CoordinatorRunState s;
  int64_t step = 0;
  if (Status st = read_run(file, what, step, s.metrics_bytes, s.config_hash, s.islands); !st.is_ok()) return st;
  const std::string* state = file.find("coordinator.state");
  if (state == nullptr) return corrupt(what + ": no section 'coordinator.state'");
  bytes::Reader r(*state);
  transport::CoordinatorSnapshot& t = s.snapshot;
  t.epoch = r.u64();
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    transport::CoordinatorSnapshot::Member m;
    m.id = static_cast<int>(r.i64());
    m.session = r.u64();
    m.endpoint = r.str();
    m.public_key = r.str();
    t.members.push_back(std::move(m));
  }
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    std::string key = r.str();
    std::string value = r.str();  // u64 length + bytes, as written
    t.store[std::move(key)].assign(value.begin(), value.end());
  }
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    transport::CoordinatorSnapshot::Records rec;
    rec.island = static_cast<int>(r.i64());
    rec.session = r.u64();
    rec.floor = r.u64();
    for (int64_t v : r.i64s()) rec.above.push_back(static_cast<uint64_t>(v));
    t.records.push_back(std::move(rec));
  }
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    transport::CoordinatorSnapshot::Applied a;
    a.island = static_cast<int>(r.i64());
    a.session = r.u64();
    for (int64_t v : r.i64s()) a.ids.push_back(static_cast<uint64_t>(v));
    t.applied.push_back(std::move(a));
  }
  t.server_clock_s = r.f64();
  if (!r.done()) return corrupt(what + ": malformed section 'coordinator.state'");
  ATOLL_TRY(read_server(file, what, s.has_server, s.server_round, s.server));
  return s;
}

std::vector<checkpoint::Section> encode_island(const IslandProcessCheckpoint& c) {
  std::vector<checkpoint::Section> out;
  out.push_back(run_section(c.step, 0, c.config_hash, c.islands));
  {
    bytes::ByteWriter w;
    put_tensor(w, c.global);
    out.push_back({"global", std::move(w).bytes()});
  }
  bytes::ByteWriter w;
  w.i64(c.island);
  core::put_island_training(w, c);
  w.u64(c.bytes.sent);
  w.u64(c.bytes.received);
  w.u64(c.bytes.raw_sent);
  put_tensor(w, c.torch_rng);
  w.u64(c.group_seqs.size());
  for (const auto& [key, seq] : c.group_seqs) {
    w.i64(key);
    w.u64(seq);
  }
  out.push_back({"island", std::move(w).bytes()});
  if (c.in_flight) {
    bytes::ByteWriter f;
    core::put_result(f, *c.in_flight);
    out.push_back({"inflight", std::move(f).bytes()});
  }
  return out;
}

StatusOr<IslandProcessCheckpoint> decode_island(const checkpoint::Checkpoint& file, const std::string& what) {
  IslandProcessCheckpoint c;
  uint64_t metrics_bytes = 0;
  if (Status s = read_run(file, what, c.step, metrics_bytes, c.config_hash, c.islands); !s.is_ok()) return s;
  const std::string* global = file.find("global");
  const std::string* island = file.find("island");
  if (global == nullptr || island == nullptr) return corrupt(what + ": not an island's checkpoint (no global or island section)");
  bytes::Reader g(*global);
  c.global = get_tensor(g);
  if (!g.done() || !c.global.defined()) return corrupt(what + ": malformed section 'global'");
  bytes::Reader r(*island);
  c.island = static_cast<int>(r.i64());
  core::get_island_training(r, c);
  c.bytes.sent = r.u64();
  c.bytes.received = r.u64();
  c.bytes.raw_sent = r.u64();
  c.torch_rng = get_tensor(r);
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    const auto key = static_cast<uint32_t>(r.i64());
    c.group_seqs[key] = r.u64();
  }
  if (!r.done() || !c.params.defined()) return corrupt(what + ": malformed section 'island'");
  if (const std::string* inflight = file.find("inflight")) {
    bytes::Reader f(*inflight);
    c.in_flight = core::get_result(f);
    if (!f.done()) return corrupt(what + ": malformed section 'inflight'");
  }
  return c;
}

std::vector<checkpoint::Section> encode_coordinator(const CoordinatorCheckpoint& c) {
  std::vector<checkpoint::Section> out;
  out.push_back(run_section(c.step, c.metrics_bytes, c.config_hash, c.islands));
  bytes::ByteWriter w;
  w.u64(c.epoch);
  w.i64s({c.members.begin(), c.members.end()});
  w.i64s({c.finished.begin(), c.finished.end()});
  out.push_back({"coordinator", std::move(w).bytes()});
  if (c.has_server) write_server(out, 0, c.server_round, c.server);
  return out;
}

StatusOr<CoordinatorCheckpoint> decode_coordinator(const checkpoint::Checkpoint& file, const std::string& what) {
  CoordinatorCheckpoint c;
  if (Status s = read_run(file, what, c.step, c.metrics_bytes, c.config_hash, c.islands); !s.is_ok()) return s;
  const std::string* coord = file.find("coordinator");
  if (coord == nullptr) return corrupt(what + ": not a coordinator's checkpoint (no section 'coordinator')");
  bytes::Reader r(*coord);
  c.epoch = r.u64();
  for (int64_t m : r.i64s()) c.members.push_back(static_cast<int>(m));
  if (r.remaining() > 0)  // absent in the files of builds before fedavg's real-run checkpoints
    for (int64_t m : r.i64s()) c.finished.push_back(static_cast<int>(m));
  if (!r.done() || !std::is_sorted(c.members.begin(), c.members.end()) ||
      !std::is_sorted(c.finished.begin(), c.finished.end()))
    return corrupt(what + ": malformed section 'coordinator'");
  ATOLL_TRY(read_server(file, what, c.has_server, c.server_round, c.server));
  return c;
}

namespace {

// Reads every checkpoint of `dir` newest first; `take` decodes one (an error refuses it).
void each_usable(const std::string& dir, const std::function<void(const std::string&)>& refused,
                 const std::function<Status(const checkpoint::Checkpoint&, const std::string& what)>& take) {
  auto entries = checkpoint::CheckpointDir(dir, 1).list();
  std::reverse(entries.begin(), entries.end());
  for (const auto& e : entries) {
    auto file = checkpoint::read_checkpoint(e.path);
    Status s = file.is_ok() ? take(file.value(), "checkpoint '" + e.path + "'") : file.status();
    if (!s.is_ok() && refused) refused(s.message() + "; falling back to the previous checkpoint");
  }
}

}  // namespace

std::vector<int64_t> usable_island_steps(const std::string& dir, const std::string& config_hash, int island,
                                         const std::function<void(const std::string&)>& refused) {
  std::vector<int64_t> out;
  each_usable(dir, refused, [&](const checkpoint::Checkpoint& file, const std::string& what) -> Status {
    auto c = decode_island(file, what);
    if (!c.is_ok()) return c.status();
    if (c->config_hash != config_hash) return corrupt(what + " was written by a run with another config");
    if (c->island != island) return corrupt(what + " belongs to island " + std::to_string(c->island));
    out.push_back(c->step);
    return Status::ok();
  });
  return out;
}

std::vector<CoordinatorCheckpoint> usable_coordinator_checkpoints(
    const std::string& dir, const std::string& config_hash, const std::function<void(const std::string&)>& refused) {
  std::vector<CoordinatorCheckpoint> out;
  each_usable(dir, refused, [&](const checkpoint::Checkpoint& file, const std::string& what) -> Status {
    auto c = decode_coordinator(file, what);
    if (!c.is_ok()) return c.status();
    if (c->config_hash != config_hash) return corrupt(what + " was written by a run with another config");
    out.push_back(std::move(c.value()));
    return Status::ok();
  });
  return out;
}

std::optional<ResumePoint> resume_step(const std::vector<CoordinatorCheckpoint>& coordinator,
                                       const std::map<int, std::vector<int64_t>>& have, std::string* why) {
  std::string missing;
  for (const auto& c : coordinator) {
    std::string lacks;
    for (int m : c.members) {
      auto it = have.find(m);
      if (it == have.end() || std::find(it->second.begin(), it->second.end(), c.step) == it->second.end())
        lacks += std::string(lacks.empty() ? "" : ", ") + std::to_string(m);
    }
    if (lacks.empty()) return ResumePoint{c.step, c.members};
    missing += (missing.empty() ? "" : "; ") + std::string("step ") + std::to_string(c.step) + ": island(s) " + lacks +
               " hold no usable checkpoint of it";
  }
  if (why != nullptr) *why = coordinator.empty() ? "the coordinator holds no usable checkpoint" : missing;
  return std::nullopt;
}

std::string steps_text(const std::vector<int64_t>& steps) {
  std::string s;
  for (int64_t v : steps) {
    if (!s.empty()) s += ',';
    s += std::to_string(v);
  }
  return s;
}

std::vector<int64_t> parse_steps(const std::string& text) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string part = text.substr(i, j - i);
    if (part.empty() || part.size() > 18 || part.find_first_not_of("0123456789") != std::string::npos) return {};
    out.push_back(std::stoll(part));
    i = j + 1;
  }
  return out;
}

}  // namespace atl::run
