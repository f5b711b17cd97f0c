#include "src/core/sim_checkpoint.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <cstring>

#include "src/core/run_dir.h"

namespace atl::core {
namespace {

using checkpoint::ByteReader;
using checkpoint::ByteWriter;

// Dtype codes of stored tensors (docs/checkpoints.md "Tensors"); never renumber.
enum class TensorCode : uint8_t { kFloat32 = 1, kFloat64 = 2, kInt64 = 3, kUInt8 = 4 };

bool code_of(at::ScalarType t, TensorCode& code) {
  switch (t) {
    case at::kFloat: code = TensorCode::kFloat32; return true;
    case at::kDouble: code = TensorCode::kFloat64; return true;
    case at::kLong: code = TensorCode::kInt64; return true;
    case at::kByte: code = TensorCode::kUInt8; return true;
    default: return false;
  }
}

bool type_of(uint8_t code, at::ScalarType& t) {
  switch (static_cast<TensorCode>(code)) {
    case TensorCode::kFloat32: t = at::kFloat; return true;
    case TensorCode::kFloat64: t = at::kDouble; return true;
    case TensorCode::kInt64: t = at::kLong; return true;
    case TensorCode::kUInt8: t = at::kByte; return true;
  }
  return false;
}


void put_hub(ByteWriter& w, const transport::InprocHub::Snapshot& h) {
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

transport::InprocHub::Snapshot get_hub(ByteReader& r) {
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
void put_settled(ByteWriter& w, const std::vector<transport::InprocHub::Settled>& settled) {
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

std::vector<transport::InprocHub::Settled> get_settled(ByteReader& r) {
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

void put_result(ByteWriter& w, const transport::CollectiveResult& result) {
  w.u8(static_cast<uint8_t>(result.status.code()));
  w.str(result.status.message());
  w.i64s({result.contributors.begin(), result.contributors.end()});
  w.f64(result.weight_sum);
}

transport::CollectiveResult get_result(ByteReader& r) {
  transport::CollectiveResult out;
  const uint8_t code = r.u8();
  std::string message = r.str();
  if (code > static_cast<uint8_t>(StatusCode::kInternal)) r.fail();
  out.status = Status(static_cast<StatusCode>(code), std::move(message));
  for (int64_t id : r.i64s()) out.contributors.push_back(static_cast<int>(id));
  out.weight_sum = r.f64();
  return out;
}

void put_tensor(ByteWriter& w, const at::Tensor& t) {
  if (!t.defined()) {
    w.u8(0);
    return;
  }
  TensorCode code{};
  TORCH_CHECK(code_of(t.scalar_type(), code), "checkpoint: tensors of dtype ", t.scalar_type(), " are not stored");
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  w.u8(1);
  w.u8(static_cast<uint8_t>(code));
  w.i64s(c.sizes().vec());
  w.u64(c.nbytes());
  w.raw(c.data_ptr(), c.nbytes());
}

at::Tensor get_tensor(ByteReader& r) {
  if (r.u8() == 0) return {};
  at::ScalarType type{};
  const uint8_t code = r.u8();
  const std::vector<int64_t> sizes = r.i64s();
  const uint64_t nbytes = r.u64();
  int64_t numel = 1;
  bool sane = type_of(code, type);
  for (int64_t s : sizes) {
    sane = sane && s >= 0 && (s == 0 || numel <= (int64_t{1} << 40) / s);
    if (sane) numel *= s;
  }
  if (!r.ok() || !sane || nbytes != static_cast<uint64_t>(numel) * c10::elementSize(type) || nbytes > r.remaining()) {
    r.fail();
    return {};
  }
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(type));
  r.raw(t.data_ptr(), nbytes);
  return t;
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

void put_tensors(ByteWriter& w, const std::vector<at::Tensor>& ts) {
  w.u64(ts.size());
  for (const auto& t : ts) put_tensor(w, t);
}
std::vector<at::Tensor> get_tensors(ByteReader& r) {
  const uint64_t n = r.u64();
  std::vector<at::Tensor> out;
  if (n > r.remaining()) {  // every tensor takes at least one byte
    r.fail();
    return out;
  }
  for (uint64_t i = 0; i < n && r.ok(); ++i) out.push_back(get_tensor(r));
  return out;
}

void put_server_state(ByteWriter& w, double time_s, int64_t round, const transport::OuterServer::State& s) {
  w.f64(time_s);
  w.i64(round);
  w.i64s(s.counters);
  w.u64(s.reals.size());
  for (double d : s.reals) w.f64(d);
  put_tensors(w, s.tensors);
}

void get_server_state(ByteReader& r, double& time_s, int64_t& round, transport::OuterServer::State& s) {
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
    ByteWriter w;
    w.i64(c.step);
    w.u64(c.metrics_bytes);
    w.str(c.config_hash);
    w.u64(c.islands.size());
    out.push_back({"run", std::move(w).bytes()});
  }
  {
    ByteWriter w;
    put_tensor(w, c.global);
    out.push_back({"global", std::move(w).bytes()});
  }
  {
    ByteWriter w;
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
    ByteWriter w;
    put_settled(w, c.hub.settled);
    out.push_back({"inflight", std::move(w).bytes()});
  }
  if (!c.kills_fired.empty()) {
    ByteWriter w;
    w.i64s(c.kills_fired);
    out.push_back({"events", std::move(w).bytes()});
  }
  if (c.has_server) {
    ByteWriter w;
    put_server_state(w, c.server_time, c.server_round, c.server);
    out.push_back({"server", std::move(w).bytes()});
  }
  if (!c.evals.path_results.empty()) {  // DiPaCo: the path_eval results taken so far
    ByteWriter w;
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
    ByteWriter w;
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
  ByteReader r(*run);
  c.step = r.i64();
  c.metrics_bytes = r.u64();
  c.config_hash = r.str();
  islands = r.u64();
  if (!r.done()) return corrupt(what + ": malformed section 'run'");
  ByteReader g(*global);
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
    ByteReader r(*sim);
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
    ByteReader r(*inflight);
    c.hub.settled = get_settled(r);
    if (!r.done()) return corrupt(what + ": malformed section 'inflight'");
  }
  if (const std::string* events = file.find("events")) {
    ByteReader r(*events);
    c.kills_fired = r.i64s();
    if (!r.done() || !std::is_sorted(c.kills_fired.begin(), c.kills_fired.end()))
      return corrupt(what + ": malformed section 'events'");
  }
  if (const std::string* server = file.find("server")) {
    ByteReader r(*server);
    c.has_server = true;
    get_server_state(r, c.server_time, c.server_round, c.server);
    if (!r.done()) return corrupt(what + ": malformed section 'server'");
  }
  if (const std::string* paths = file.find("path_evals")) {
    ByteReader r(*paths);
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
    ByteReader r(*bytes);
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
