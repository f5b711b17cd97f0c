#include "src/core/sim_checkpoint.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <cstring>

#include "src/core/run_dir.h"

namespace atl::core {
namespace {


void put_hub(bytes::ByteWriter& w, const transport::InprocHub::Snapshot& h) {
  w.i64s({h.members.begin(), h.members.end()});
  w.u64(h.epoch);
  w.u64(h.counters.size());
  for (const auto& c : h.counters) {
    w.u64(c.sent);
    w.u64(c.received);
    w.u64(c.raw_sent);
  }
  w.u64(h.waits.size());
  for (const auto& x : h.waits) {
    w.f64(x.comm_s);
    w.f64(x.idle_s);
  }
  w.i64s({h.first_seq.begin(), h.first_seq.end()});
  w.i64s({h.next_seq.begin(), h.next_seq.end()});
  for (const auto* m : {&h.sub_next_seq, &h.sub_first_seq}) {
    w.u64(m->size());
    for (const auto& [k, v] : *m) {
      w.u32(k.first);
      w.i64(k.second);
      w.u64(v);
    }
  }
  w.i64s({h.joiners.begin(), h.joiners.end()});
  w.f64(h.detected_at);
  w.f64(h.last_push_arrival);
  w.str(h.rng);
}

transport::InprocHub::Snapshot get_hub(bytes::Reader& r) {
  transport::InprocHub::Snapshot h;
  for (int64_t m : r.i64s()) h.members.push_back(static_cast<int>(m));
  h.epoch = r.u64();
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    transport::ByteCounters c;
    c.sent = r.u64();
    c.received = r.u64();
    c.raw_sent = r.u64();
    h.counters.push_back(c);
  }
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    transport::InprocHub::WaitTime x;
    x.comm_s = r.f64();
    x.idle_s = r.f64();
    h.waits.push_back(x);
  }
  for (int64_t v : r.i64s()) h.first_seq.push_back(static_cast<uint64_t>(v));
  for (int64_t v : r.i64s()) h.next_seq.push_back(static_cast<uint64_t>(v));
  for (auto* m : {&h.sub_next_seq, &h.sub_first_seq}) {
    for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
      const uint32_t key = r.u32();
      const int id = static_cast<int>(r.i64());
      (*m)[{key, id}] = r.u64();
    }
  }
  for (int64_t j : r.i64s()) h.joiners.push_back(static_cast<int>(j));
  h.detected_at = r.f64();
  h.last_push_arrival = r.f64();
  h.rng = r.str();
  return h;
}

std::string island_section(size_t i) { return "island." + std::to_string(i); }

// Section "inflight" (docs/checkpoints.md): the hub's collectives complete but not yet
// collected by every member (InprocHub::Settled); written only when there is one.
void put_settled(bytes::ByteWriter& w, const std::vector<transport::InprocHub::Settled>& settled) {
  w.u64(settled.size());
  for (const auto& p : settled) {
    w.u32(p.key);
    w.u64(p.seq);
    w.u8(p.kind);
    w.i64(p.root);
    w.i64s({p.ids.begin(), p.ids.end()});
    put_result(w, p.result);
    w.f64(p.start);
    w.f64(p.done_at);
    w.u64(p.holders.size());
    for (const auto& [island, posted] : p.holders) {
      w.i64(island);
      w.f64(posted);
    }
  }
}

std::vector<transport::InprocHub::Settled> get_settled(bytes::Reader& r) {
  std::vector<transport::InprocHub::Settled> out;
  for (uint64_t i = 0, n = r.u64(); i < n && r.ok(); ++i) {
    transport::InprocHub::Settled p;
    p.key = r.u32();
    p.seq = r.u64();
    p.kind = r.u8();
    p.root = static_cast<int>(r.i64());
    for (int64_t id : r.i64s()) p.ids.push_back(static_cast<int>(id));
    p.result = get_result(r);
    if (p.kind > 2) r.fail();
    p.start = r.f64();
    p.done_at = r.f64();
    for (uint64_t j = 0, m = r.u64(); j < m && r.ok(); ++j) {
      const int island = static_cast<int>(r.i64());
      p.holders.emplace_back(island, r.f64());
    }
    if (p.holders.empty()) r.fail();
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

void put_result(bytes::ByteWriter& w, const transport::CollectiveResult& result) {
  w.u8(static_cast<uint8_t>(result.status.code()));
  w.str(result.status.message());
  w.i64s({result.contributors.begin(), result.contributors.end()});
  w.f64(result.weight_sum);
}

transport::CollectiveResult get_result(bytes::Reader& r) {
  transport::CollectiveResult out;
  const uint8_t code = r.u8();
  std::string message = r.str();
  if (code > static_cast<uint8_t>(StatusCode::kInternal)) r.fail();
  out.status = Status(static_cast<StatusCode>(code), std::move(message));
  for (int64_t id : r.i64s()) out.contributors.push_back(static_cast<int>(id));
  out.weight_sum = r.f64();
  return out;
}

std::string resume_hash(const config::Config& config) {
  config::Config c = config;
  c.run.resume = false;
  c.checkpoint.keep = 0;
  c.checkpoint.dir.clear();
  // Policies for failed writes: a run may resume under another one.
  c.checkpoint.on_failure = config::CheckpointConfig().on_failure;
  c.run.metrics_on_failure = config::RunConfig().metrics_on_failure;
  return config_hash(c);
}

void put_server_state(bytes::ByteWriter& w, double time_s, int64_t round, const transport::OuterServer::State& s) {
  w.f64(time_s);
  w.i64(round);
  w.i64s(s.counters);
  w.u64(s.reals.size());
  for (double d : s.reals) w.f64(d);
  put_tensors(w, s.tensors);
}

void get_server_state(bytes::Reader& r, double& time_s, int64_t& round, transport::OuterServer::State& s) {
  time_s = r.f64();
  round = r.i64();
  s.counters = r.i64s();
  const uint64_t reals = r.u64();
  if (reals > r.remaining() / 8) r.fail();
  for (uint64_t i = 0; i < reals && r.ok(); ++i) s.reals.push_back(r.f64());
  s.tensors = get_tensors(r);
}

std::vector<checkpoint::Section> encode_sim_checkpoint(const SimCheckpoint& c) {
  std::vector<checkpoint::Section> out;
  {
    bytes::ByteWriter w;
    w.i64(c.step);
    w.u64(c.metrics_bytes);
    w.str(c.config_hash);
    w.u64(c.islands.size());
    out.push_back({"run", std::move(w).bytes()});
  }
  {
    bytes::ByteWriter w;
    put_tensor(w, c.global);
    out.push_back({"global", std::move(w).bytes()});
  }
  {
    bytes::ByteWriter w;
    put_hub(w, c.hub);
    w.str(c.cost_model);
    const ProgressState& p = c.progress;
    w.i64(p.steps_done);
    w.i64(p.steps_total);
    w.f64(p.last_loss);
    w.f64(p.val_loss);
    w.i64(p.rounds);
    w.u64(p.bytes);
    w.i64s(c.evals.steps);
    w.i64(c.evals.last_step);
    w.f64(c.evals.last_loss);
    w.f64(c.evals.last_accuracy);
    w.f64(c.evals.best_loss);
    w.f64(c.target_time);
    w.f64(c.target_bytes);
    w.i64(c.target_step);
    put_tensor(w, c.torch_rng);
    out.push_back({"simulator", std::move(w).bytes()});
  }
  if (!c.hub.settled.empty()) {
    bytes::ByteWriter w;
    put_settled(w, c.hub.settled);
    out.push_back({"inflight", std::move(w).bytes()});
  }
  if (!c.kills_fired.empty()) {
    bytes::ByteWriter w;
    w.i64s(c.kills_fired);
    out.push_back({"events", std::move(w).bytes()});
  }
  if (c.has_server) {
    bytes::ByteWriter w;
    put_server_state(w, c.server_time, c.server_round, c.server);
    out.push_back({"server", std::move(w).bytes()});
  }
  if (!c.evals.path_results.empty()) {  // DiPaCo: the path_eval results taken so far
    bytes::ByteWriter w;
    w.u64(c.evals.path_results.size());
    for (const auto& [step, r] : c.evals.path_results) {
      w.i64(step);
      w.i64(r.path);
      w.i64(r.paths);
      w.f64(r.loss);
      w.i64(r.count);
      w.i64(r.sequences);
      w.i64(r.train_sequences);
    }
    out.push_back({"path_evals", std::move(w).bytes()});
  }
  for (size_t i = 0; i < c.islands.size(); ++i) {
    const IslandCheckpoint& is = c.islands[i];
    bytes::ByteWriter w;
    put_island_training(w, is);
    for (double d : {is.time_s, is.compute_s, is.slept_s, is.last_compute_s, is.last_comm_s, is.last_waited_s,
                     is.last_slept_s, is.member_since_s, is.member_s, is.end_time_s})
      w.f64(d);
    w.i64(is.rounds);
    w.boolean(is.planned);
    w.boolean(is.alive);
    w.boolean(is.finished);
    out.push_back({island_section(i), std::move(w).bytes()});
  }
  return out;
}

namespace {

// Reads "run" and "global" into c.
Status decode_head(const checkpoint::Checkpoint& file, const std::string& what, SimCheckpoint& c, uint64_t& islands) {
  const std::string* run = file.find("run");
  const std::string* global = file.find("global");
  if (run == nullptr || global == nullptr) return corrupt(what + ": not a simulator checkpoint (no run or global section)");
  bytes::Reader r(*run);
  c.step = r.i64();
  c.metrics_bytes = r.u64();
  c.config_hash = r.str();
  islands = r.u64();
  if (!r.done()) return corrupt(what + ": malformed section 'run'");
  bytes::Reader g(*global);
  c.global = get_tensor(g);
  if (!g.done() || !c.global.defined()) return corrupt(what + ": malformed section 'global'");
  return Status::ok();
}

}  // namespace

StatusOr<SimCheckpoint> decode_global(const checkpoint::Checkpoint& file, const std::string& what) {
  SimCheckpoint c;
  uint64_t islands = 0;
  Status s = decode_head(file, what, c, islands);
  if (!s.is_ok()) return s;
  return c;
}

StatusOr<SimCheckpoint> decode_sim_checkpoint(const checkpoint::Checkpoint& file, const std::string& what) {
  SimCheckpoint c;
  uint64_t islands = 0;
  Status s = decode_head(file, what, c, islands);
  if (!s.is_ok()) return s;
  const std::string* sim = file.find("simulator");
  if (sim == nullptr) return corrupt(what + ": no section 'simulator'");
  {
    bytes::Reader r(*sim);
    c.hub = get_hub(r);
    c.cost_model = r.str();
    ProgressState& p = c.progress;
    p.steps_done = r.i64();
    p.steps_total = r.i64();
    p.last_loss = r.f64();
    p.val_loss = r.f64();
    p.rounds = r.i64();
    p.bytes = r.u64();
    c.evals.steps = r.i64s();
    c.evals.last_step = r.i64();
    c.evals.last_loss = r.f64();
    c.evals.last_accuracy = r.f64();
    c.evals.best_loss = r.f64();
    c.target_time = r.f64();
    c.target_bytes = r.f64();
    c.target_step = r.i64();
    c.torch_rng = get_tensor(r);
    if (!r.done()) return corrupt(what + ": malformed section 'simulator'");
  }
  if (const std::string* inflight = file.find("inflight")) {
    bytes::Reader r(*inflight);
    c.hub.settled = get_settled(r);
    if (!r.done()) return corrupt(what + ": malformed section 'inflight'");
  }
  if (const std::string* events = file.find("events")) {
    bytes::Reader r(*events);
    c.kills_fired = r.i64s();
    if (!r.done() || !std::is_sorted(c.kills_fired.begin(), c.kills_fired.end()))
      return corrupt(what + ": malformed section 'events'");
  }
  if (const std::string* server = file.find("server")) {
    bytes::Reader r(*server);
    c.has_server = true;
    get_server_state(r, c.server_time, c.server_round, c.server);
    if (!r.done()) return corrupt(what + ": malformed section 'server'");
  }
  if (const std::string* paths = file.find("path_evals")) {
    bytes::Reader r(*paths);
    const uint64_t n = r.u64();
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      EvalResult e;
      const int64_t step = r.i64();
      e.path = static_cast<int>(r.i64());
      e.paths = static_cast<int>(r.i64());
      e.loss = r.f64();
      e.count = r.i64();
      e.sequences = r.i64();
      e.train_sequences = r.i64();
      c.evals.path_results.emplace_back(step, e);
    }
    if (!r.done()) return corrupt(what + ": malformed section 'path_evals'");
  }
  for (uint64_t i = 0; i < islands; ++i) {
    const std::string name = island_section(i);
    const std::string* bytes = file.find(name);
    if (bytes == nullptr) return corrupt(what + ": no section '" + name + "'");
    bytes::Reader r(*bytes);
    IslandCheckpoint is;
    get_island_training(r, is);
    for (double* d : {&is.time_s, &is.compute_s, &is.slept_s, &is.last_compute_s, &is.last_comm_s, &is.last_waited_s,
                      &is.last_slept_s, &is.member_since_s, &is.member_s, &is.end_time_s})
      *d = r.f64();
    is.rounds = r.i64();
    is.planned = r.boolean();
    is.alive = r.boolean();
    is.finished = r.boolean();
    if (!r.done() || is.params.defined() != is.alive) return corrupt(what + ": malformed section '" + name + "'");
    c.islands.push_back(std::move(is));
  }
  return c;
}

}  // namespace atl::core
