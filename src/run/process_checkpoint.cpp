#include "src/run/process_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>

#include "src/base/bytes.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/core/sim_checkpoint.h"

namespace atl::run {
namespace {

using core::read_section;
using core::write_section;

// Section "run" (core::run_layout, shared by both modes).
checkpoint::Section run_section(int64_t step, uint64_t metrics_bytes, const std::string& hash, int islands) {
  return write_section("run", [](auto& io, auto&... a) { core::run_layout(io, a...); }, step, metrics_bytes, hash,
                       islands);
}

Status read_run(const checkpoint::Checkpoint& file, const std::string& what, int64_t& step, uint64_t& metrics_bytes,
                std::string& hash, int& islands) {
  uint64_t n = 0;
  ATOLL_TRY(read_section(file, what, "run", [](auto& io, auto&... a) { core::run_layout(io, a...); }, step,
                         metrics_bytes, hash, n));
  if (n > (1u << 20)) return corrupt(what + ": malformed section 'run'");
  islands = static_cast<int>(n);
  return Status::ok();
}

// Section "server" (core::server_layout, shared by both modes), in the coordinator's running
// state and in its checkpoints: written with a server role only.
void write_server(std::vector<checkpoint::Section>& out, double clock_s, int64_t round,
                  const transport::OuterServer::State& state) {
  out.push_back(write_section("server", [](auto& io, auto&... a) { core::server_layout(io, a...); }, clock_s, round,
                              state));
}
Status read_server(const checkpoint::Checkpoint& file, const std::string& what, bool& has, int64_t& round,
                   transport::OuterServer::State& state) {
  if (file.find("server") == nullptr) return Status::ok();
  double clock_s = 0;
  has = true;
  return read_section(file, what, "server", [](auto& io, auto&... a) { core::server_layout(io, a...); }, clock_s,
                      round, state);
}

// Section "coordinator.state": the coordinator's snapshot (members, store, record and applied
// ledgers, the server's clock).
template <class Io, class T>
void snapshot_layout(Io& io, T& t) {
  io.u64("epoch", t.epoch);
  io.list("members", t.members, [&](auto& m) {
    io.i64("id", m.id);
    io.u64("session", m.session);
    io.str("endpoint", m.endpoint);
    io.str("public key", m.public_key);
  });
  io.map("store", t.store, [&](auto& key, auto& value) {
    io.str("key", key);
    io.blob("value", value);
  });
  io.list("records", t.records, [&](auto& r) {
    io.i64("island", r.island);
    io.u64("session", r.session);
    io.u64("floor", r.floor);
    io.i64s("above", r.above);
  });
  io.list("applied", t.applied, [&](auto& a) {
    io.i64("island", a.island);
    io.u64("session", a.session);
    io.i64s("ids", a.ids);
  });
  io.f64("server clock", t.server_clock_s);
}

// Section "island" of a real run's island checkpoint: its id, its training state, its byte
// counters, libtorch's generator and the next seq of each sub-group.
template <class Io, class C>
void island_layout(Io& io, C& c) {
  io.i64("island", c.island);
  core::island_training_layout(io, c);
  io.u64("bytes sent", c.bytes.sent);
  io.u64("bytes received", c.bytes.received);
  io.u64("raw bytes sent", c.bytes.raw_sent);
  core::tensor_field(io, c.torch_rng);
  io.map("group seqs", c.group_seqs, [&](auto& key, auto& seq) {
    io.i64("key", key);
    io.u64("seq", seq);
  });
}

// Section "coordinator" of the coordinator's checkpoints: epoch, members, finished islands
// (the last absent in the files of builds before fedavg's real-run checkpoints).
template <class Io, class C>
void coordinator_layout(Io& io, C& c) {
  io.u64("epoch", c.epoch);
  io.i64s("members", c.members);
  if constexpr (Io::kReads) {
    if (io.reader().remaining() == 0) return;
  }
  io.i64s("finished", c.finished);
}

}  // namespace

std::string checkpoint_mark_key(int64_t step, int island) {
  return "atoll/checkpoint/" + std::to_string(step) + "/island/" + std::to_string(island);
}
std::string checkpoint_done_key(int64_t step) { return "atoll/checkpoint/" + std::to_string(step) + "/done"; }
int64_t checkpoint_key_step(const std::string& key) {
  const std::string prefix = "atoll/checkpoint/";
  const size_t slash = key.find('/', prefix.size());
  if (key.rfind(prefix, 0) != 0 || slash == std::string::npos) return -1;
  const std::vector<int64_t> step = parse_steps(key.substr(prefix.size(), slash - prefix.size()));
  return step.size() == 1 ? step[0] : -1;
}
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
  out.push_back(write_section("coordinator.state", [](auto& io, auto& t) { snapshot_layout(io, t); }, s.snapshot));
  if (s.has_server) write_server(out, s.snapshot.server_clock_s, s.server_round, s.server);
  return out;
}

StatusOr<CoordinatorRunState> decode_run_state(const checkpoint::Checkpoint& file, const std::string& what) {
  CoordinatorRunState s;
  int64_t step = 0;
  ATOLL_TRY(read_run(file, what, step, s.metrics_bytes, s.config_hash, s.islands));
  ATOLL_TRY(read_section(file, what, "coordinator.state", [](auto& io, auto& t) { snapshot_layout(io, t); },
                         s.snapshot));
  ATOLL_TRY(read_server(file, what, s.has_server, s.server_round, s.server));
  return s;
}

std::vector<checkpoint::Section> encode_island(const IslandProcessCheckpoint& c) {
  std::vector<checkpoint::Section> out;
  out.push_back(run_section(c.step, 0, c.config_hash, c.islands));
  out.push_back(write_section("global", [](auto& io, auto& t) { core::tensor_field(io, t); }, c.global));
  out.push_back(write_section("island", [](auto& io, auto& x) { island_layout(io, x); }, c));
  if (c.in_flight)
    out.push_back(write_section("inflight", [](auto& io, auto& r) { core::result_layout(io, r); }, *c.in_flight));
  return out;
}

StatusOr<IslandProcessCheckpoint> decode_island(const checkpoint::Checkpoint& file, const std::string& what) {
  IslandProcessCheckpoint c;
  uint64_t metrics_bytes = 0;
  ATOLL_TRY(read_run(file, what, c.step, metrics_bytes, c.config_hash, c.islands));
  if (file.find("global") == nullptr || file.find("island") == nullptr)
    return corrupt(what + ": not an island's checkpoint (no global or island section)");
  ATOLL_TRY(read_section(file, what, "global", [](auto& io, auto& t) { core::tensor_field(io, t); }, c.global));
  if (!c.global.defined()) return corrupt(what + ": malformed section 'global'");
  ATOLL_TRY(read_section(file, what, "island", [](auto& io, auto& x) { island_layout(io, x); }, c));
  if (!c.params.defined()) return corrupt(what + ": malformed section 'island'");
  if (file.find("inflight")) {
    transport::CollectiveResult r;
    ATOLL_TRY(read_section(file, what, "inflight", [](auto& io, auto& x) { core::result_layout(io, x); }, r));
    c.in_flight = std::move(r);
  }
  return c;
}

std::vector<checkpoint::Section> encode_coordinator(const CoordinatorCheckpoint& c) {
  std::vector<checkpoint::Section> out;
  out.push_back(run_section(c.step, c.metrics_bytes, c.config_hash, c.islands));
  out.push_back(write_section("coordinator", [](auto& io, auto& x) { coordinator_layout(io, x); }, c));
  if (c.has_server) write_server(out, 0, c.server_round, c.server);
  return out;
}

StatusOr<CoordinatorCheckpoint> decode_coordinator(const checkpoint::Checkpoint& file, const std::string& what) {
  CoordinatorCheckpoint c;
  ATOLL_TRY(read_run(file, what, c.step, c.metrics_bytes, c.config_hash, c.islands));
  if (file.find("coordinator") == nullptr)
    return corrupt(what + ": not a coordinator's checkpoint (no section 'coordinator')");
  ATOLL_TRY(read_section(file, what, "coordinator", [](auto& io, auto& x) { coordinator_layout(io, x); }, c));
  if (!std::is_sorted(c.members.begin(), c.members.end()) || !std::is_sorted(c.finished.begin(), c.finished.end()))
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

void restore_island(core::IslandParts& parts, core::IslandRuntime& runtime, const IslandProcessCheckpoint& c) {
  core::restore_training(parts, runtime, c);
  if (c.torch_rng.defined()) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(c.torch_rng);
  }
}


}  // namespace atl::run
