#include "src/core/sim_checkpoint.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cstring>

#include "src/core/island_parts.h"
#include "src/core/run_dir.h"

namespace atl::core {

IslandTraining capture_training(const IslandParts& parts, const IslandRuntime& runtime) {
  IslandTraining t;
  t.params = parts.model->params().detach().clone();
  t.optimizer_steps = parts.optimizer->steps();
  for (const auto& x : parts.optimizer->state()) t.optimizer_state.push_back(x.defined() ? x.clone() : x);
  t.sampler = parts.sampler->position();
  t.algorithm = parts.algorithm->state();
  for (auto& e : t.algorithm.entries())
    if (e.tensor.defined()) e.tensor = e.tensor.clone();
  t.runtime = runtime.saved();
  return t;
}

void restore_training(IslandParts& parts, IslandRuntime& runtime, const IslandTraining& state) {
  const c10::Device on = parts.model->params().device();
  {
    at::NoGradGuard no_grad;
    parts.model->params().copy_(state.params);
  }
  std::vector<at::Tensor> inner;
  for (const auto& t : state.optimizer_state) inner.push_back(t.defined() ? t.to(on) : t);
  parts.optimizer->load(state.optimizer_steps, inner);
  runtime.resume(state.runtime, state.algorithm);
  if (!parts.use_path) parts.sampler->seek(state.sampler);
}
namespace {


// The in-process hub (part of section "simulator").
template <class Io, class H>
void hub_layout(Io& io, H& h) {
  io.i64s("members", h.members);
  io.u64("epoch", h.epoch);
  io.list("counters", h.counters, [&](auto& c) {
    io.u64("sent", c.sent);
    io.u64("received", c.received);
    io.u64("raw sent", c.raw_sent);
  });
  io.list("waits", h.waits, [&](auto& x) {
    io.f64("comm", x.comm_s);
    io.f64("idle", x.idle_s);
  });
  io.i64s("first seq", h.first_seq);
  io.i64s("next seq", h.next_seq);
  auto sub = [&](auto& key, auto& seq) {
    io.u32("sub-group key", key.first);
    io.i64("sub-group island", key.second);
    io.u64("sub-group seq", seq);
  };
  io.map("sub-group next seqs", h.sub_next_seq, sub);
  io.map("sub-group first seqs", h.sub_first_seq, sub);
  io.i64s("joiners", h.joiners);
  io.f64("detected at", h.detected_at);
  io.f64("last push arrival", h.last_push_arrival);
  io.str("rng", h.rng);
}

std::string island_section(size_t i) { return "island." + std::to_string(i); }

// Section "inflight" (docs/checkpoints.md): the hub's collectives complete but not yet
// collected by every member (InprocHub::Settled); written only when there is one.
template <class Io, class S>
void settled_layout(Io& io, S& settled) {
  io.list("settled", settled, [&](auto& p) {
    io.u32("key", p.key);
    io.u64("seq", p.seq);
    io.u8("kind", p.kind);
    io.i64("root", p.root);
    io.i64s("ids", p.ids);
    result_layout(io, p.result);
    if constexpr (Io::kReads) {
      if (p.kind > 2) io.fail();
    }
    io.f64("start", p.start);
    io.f64("done at", p.done_at);
    io.list("holders", p.holders, [&](auto& h) {
      io.i64("island", h.first);
      io.f64("posted", h.second);
    });
    if constexpr (Io::kReads) {
      if (p.holders.empty()) io.fail();
    }
  });
}

// Section "simulator": the hub, the cost model, progress, evaluations, time to target, rng.
template <class Io, class C>
void simulator_layout(Io& io, C& c) {
  hub_layout(io, c.hub);
  io.str("cost model", c.cost_model);
  auto& p = c.progress;
  io.i64("steps done", p.steps_done);
  io.i64("steps total", p.steps_total);
  io.f64("last loss", p.last_loss);
  io.f64("val loss", p.val_loss);
  io.i64("rounds", p.rounds);
  io.u64("bytes", p.bytes);
  io.i64s("eval steps", c.evals.steps);
  io.i64("last eval step", c.evals.last_step);
  io.f64("last eval loss", c.evals.last_loss);
  io.f64("last eval accuracy", c.evals.last_accuracy);
  io.f64("best loss", c.evals.best_loss);
  io.f64("target time", c.target_time);
  io.f64("target bytes", c.target_bytes);
  io.i64("target step", c.target_step);
  tensor_field(io, c.torch_rng);
}

// Section "path_evals" (several paths): the path_eval results taken so far.
template <class Io, class R>
void path_evals_layout(Io& io, R& results) {
  io.list("path evals", results, [&](auto& x) {
    io.i64("step", x.first);
    auto& r = x.second;
    io.i64("path", r.path);
    io.i64("paths", r.paths);
    io.f64("loss", r.loss);
    io.i64("count", r.count);
    io.i64("sequences", r.sequences);
    io.i64("train sequences", r.train_sequences);
  });
}

// Section "island.K": the island's training state, then the simulator's accounting of it.
template <class Io, class I>
void sim_island_layout(Io& io, I& is) {
  island_training_layout(io, is);
  io.f64("time", is.time_s);
  io.f64("compute", is.compute_s);
  io.f64("slept", is.slept_s);
  io.f64("last compute", is.last_compute_s);
  io.f64("last comm", is.last_comm_s);
  io.f64("last waited", is.last_waited_s);
  io.f64("last slept", is.last_slept_s);
  io.f64("member since", is.member_since_s);
  io.f64("member", is.member_s);
  io.f64("end time", is.end_time_s);
  io.i64("rounds", is.rounds);
  io.u8("planned", is.planned);
  io.u8("alive", is.alive);
  io.u8("finished", is.finished);
}

template <class Io, class T>
void tensor_layout(Io& io, T& t) {
  tensor_field(io, t);
}
template <class Io, class V>
void i64s_layout(Io& io, V& v) {
  io.i64s("values", v);
}

}  // namespace

std::string resume_hash(const config::Config& config) {
  config::Config c = config;
  c.run.resume = false;
  c.checkpoint.keep = 0;
  c.checkpoint.dir.clear();
  // Policies for failed writes: a run may resume under another one.
  c.checkpoint.on_failure = config::CheckpointConfig().on_failure;
  c.run.metrics_on_failure = config::RunConfig().metrics_on_failure;
  // Where the processes run and how they were submitted: a run resubmitted elsewhere resumes.
  c.hosts = config::HostsConfig();
  c.slurm = config::SlurmConfig();
  return config_hash(c);
}

std::vector<checkpoint::Section> encode_sim_checkpoint(const SimCheckpoint& c) {
  std::vector<checkpoint::Section> out;
  const uint64_t islands = c.islands.size();
  out.push_back(write_section("run", [](auto& io, auto&... a) { run_layout(io, a...); }, c.step, c.metrics_bytes,
                              c.config_hash, islands));
  out.push_back(write_section("global", [](auto& io, auto& t) { tensor_layout(io, t); }, c.global));
  out.push_back(write_section("simulator", [](auto& io, auto& x) { simulator_layout(io, x); }, c));
  if (!c.hub.settled.empty())
    out.push_back(write_section("inflight", [](auto& io, auto& x) { settled_layout(io, x); }, c.hub.settled));
  if (!c.kills_fired.empty())
    out.push_back(write_section("events", [](auto& io, auto& x) { i64s_layout(io, x); }, c.kills_fired));
  if (c.has_server)
    out.push_back(write_section("server", [](auto& io, auto&... a) { server_layout(io, a...); }, c.server_time,
                                c.server_round, c.server));
  if (!c.evals.path_results.empty())  // several paths: the path_eval results taken so far
    out.push_back(write_section("path_evals", [](auto& io, auto& x) { path_evals_layout(io, x); },
                                c.evals.path_results));
  for (size_t i = 0; i < c.islands.size(); ++i)
    out.push_back(write_section(island_section(i), [](auto& io, auto& x) { sim_island_layout(io, x); }, c.islands[i]));
  return out;
}

namespace {

// Reads "run" and "global" into c.
Status decode_head(const checkpoint::Checkpoint& file, const std::string& what, SimCheckpoint& c, uint64_t& islands) {
  if (file.find("run") == nullptr || file.find("global") == nullptr)
    return corrupt(what + ": not a simulator checkpoint (no run or global section)");
  ATOLL_TRY(read_section(file, what, "run", [](auto& io, auto&... a) { run_layout(io, a...); }, c.step,
                         c.metrics_bytes, c.config_hash, islands));
  ATOLL_TRY(read_section(file, what, "global", [](auto& io, auto& t) { tensor_layout(io, t); }, c.global));
  if (!c.global.defined()) return corrupt(what + ": malformed section 'global'");
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
  ATOLL_TRY(decode_head(file, what, c, islands));
  ATOLL_TRY(read_section(file, what, "simulator", [](auto& io, auto& x) { simulator_layout(io, x); }, c));
  if (file.find("inflight"))
    ATOLL_TRY(read_section(file, what, "inflight", [](auto& io, auto& x) { settled_layout(io, x); }, c.hub.settled));
  if (file.find("events")) {
    ATOLL_TRY(read_section(file, what, "events", [](auto& io, auto& x) { i64s_layout(io, x); }, c.kills_fired));
    if (!std::is_sorted(c.kills_fired.begin(), c.kills_fired.end())) return corrupt(what + ": malformed section 'events'");
  }
  if (file.find("server")) {
    c.has_server = true;
    ATOLL_TRY(read_section(file, what, "server", [](auto& io, auto&... a) { server_layout(io, a...); }, c.server_time,
                           c.server_round, c.server));
  }
  if (file.find("path_evals"))
    ATOLL_TRY(read_section(file, what, "path_evals", [](auto& io, auto& x) { path_evals_layout(io, x); },
                           c.evals.path_results));
  for (uint64_t i = 0; i < islands; ++i) {
    const std::string name = island_section(i);
    IslandCheckpoint is;
    ATOLL_TRY(read_section(file, what, name, [](auto& io, auto& x) { sim_island_layout(io, x); }, is));
    if (is.params.defined() != is.alive) return corrupt(what + ": malformed section '" + name + "'");
    c.islands.push_back(std::move(is));
  }
  return c;
}

}  // namespace atl::core
