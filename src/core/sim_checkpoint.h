// The simulator's checkpoint: what `atoll simulate` saves at a step boundary and restores on
// `--resume`, as sections of a checkpoint file (src/checkpoint/checkpoint_file.h). The
// sections and their payloads are documented byte by byte in docs/checkpoints.md
// ("Simulator sections"); this file is their one reader and writer.
//
// A checkpoint of step S is taken when every island of the run has finished step S and
// posted its exchanges and they are complete (an overlapped one may be uncollected: section
// "inflight" holds its result and timing), so it is a consistent cut: restoring
// it and running on gives bitwise the same parameters and metrics as never stopping.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/base/status.h"
#include "src/base/bytes.h"
#include "src/core/tensor_codec.h"
#include "src/checkpoint/checkpoint_file.h"
#include "src/core/eval_summary.h"
#include "src/core/island_runtime.h"
#include "src/core/progress.h"
#include "src/data/dataset.h"
#include "transport/inproc/inproc_group.h"

namespace atl::core {

struct IslandParts;

// An island's training state at a step boundary: what both modes save of an island and put
// back when it resumes (section layout: island_training_layout below).
struct IslandTraining {
  at::Tensor params;                      // [N] float32: the model's parameters
  int64_t optimizer_steps = 0;            // inner optimizer: step count and state tensors
  std::vector<at::Tensor> optimizer_state;
  data::Sampler::Position sampler;        // where its next batch starts
  algorithms::AlgorithmCheckpoint algorithm;
  IslandRuntime::Saved runtime;
};

// Reads the training state of a live island (the tensors copied, so the island may go on).
IslandTraining capture_training(const IslandParts& parts, const IslandRuntime& runtime);
// Puts it back into an island made afresh for the run: its parameters, the inner optimizer
// (state on the parameters' device), the runtime's counters and the algorithm's state (loaded
// right after its setup), and the sampler's position (a run with fewer islands than paths
// places the sampler of the path in progress when its algorithm loads instead).
void restore_training(IslandParts& parts, IslandRuntime& runtime, const IslandTraining& state);

// One island at the checkpoint's step boundary.
struct IslandCheckpoint : IslandTraining {
  // The simulator's own accounting of the island (src/core/simulator.cpp's Island).
  double time_s = 0;                      // its virtual clock
  double compute_s = 0, slept_s = 0;
  double last_compute_s = 0, last_comm_s = 0, last_waited_s = 0, last_slept_s = 0;
  double member_since_s = 0, member_s = 0, end_time_s = 0;
  int64_t rounds = 0;
  bool planned = false, alive = true, finished = false;
};

struct SimCheckpoint {
  int64_t step = 0;              // every island has finished this inner step
  uint64_t metrics_bytes = 0;    // metrics.jsonl's length when the checkpoint was taken
  std::string config_hash;       // resume_hash() of the run's config
  at::Tensor global;             // [N] float32: the run's global model (for atoll export)
  transport::InprocHub::Snapshot hub;
  std::string cost_model;        // CostModel::save()
  ProgressState progress;
  EvalSummary::Saved evals;
  double target_time = 0, target_bytes = 0;
  int64_t target_step = -1;
  at::Tensor torch_rng;          // libtorch's default CPU generator (dropout), uint8 state
  std::vector<int64_t> kills_fired;  // islands.events indices of the kills that happened, ascending
  std::vector<IslandCheckpoint> islands;  // a dead one without params, optimizer, algorithm
  // The server role (fedavg), section "server": its state, and the simulator's latest server
  // round and the virtual time it closed.
  bool has_server = false;
  transport::OuterServer::State server;
  double server_time = 0;
  int64_t server_round = 0;
};

// The config's identity for resuming: config_hash() of the config with run.resume, the
// checkpoint: section's keep and dir, the failed-write policies (checkpoint.on_failure,
// run.metrics_on_failure), and the hosts: and slurm: sections left out (they may differ
// between the two runs).
std::string resume_hash(const config::Config& config);

std::vector<checkpoint::Section> encode_sim_checkpoint(const SimCheckpoint& c);
// kCorrupt (one line, prefixed by `what`) for a missing or malformed section.
StatusOr<SimCheckpoint> decode_sim_checkpoint(const checkpoint::Checkpoint& file, const std::string& what);
// Only the "run" and "global" sections (atoll export): step and global model.
StatusOr<SimCheckpoint> decode_global(const checkpoint::Checkpoint& file, const std::string& what);

// Tensors in section payloads: src/core/tensor_codec.h. The layouts below state each shared
// structure once for both directions (bytes::Out writes, bytes::In reads; src/base/bytes.h);
// the simulator's sections and a real run's (src/run/process_checkpoint.cpp) are made of them.

// Section "run" of every checkpoint (the simulator's, an island's, the coordinator's): i64 step,
// u64 metrics.jsonl bytes, str config hash, u64 islands.
template <class Io, class Step, class Bytes, class Hash, class Count>
void run_layout(Io& io, Step& step, Bytes& metrics_bytes, Hash& config_hash, Count& islands) {
  io.i64("step", step);
  io.u64("metrics bytes", metrics_bytes);
  io.str("config hash", config_hash);
  io.u64("islands", islands);
}

// A collective's result (the simulator's "inflight" section, a real run's in-flight
// exchange): u8 status code, str status message, i64s contributors, f64 weight sum.
template <class Io, class R>
void result_layout(Io& io, R& result) {
  uint8_t code = static_cast<uint8_t>(result.status.code());
  std::string message = result.status.message();
  io.u8("status code", code);
  io.str("status message", message);
  if constexpr (Io::kReads) {
    if (code > static_cast<uint8_t>(StatusCode::kInternal)) io.fail();
    result.status = Status(static_cast<StatusCode>(code), std::move(message));
  }
  io.i64s("contributors", result.contributors);
  io.f64("weight sum", result.weight_sum);
}

// A server role's state (the "server" section of the simulator's checkpoints and of a real
// run's coordinator running state, docs/checkpoints.md): f64 its clock at the save, i64 the
// latest round it reported, the server's named state.
template <class Io, class Time, class Round, class S>
void server_layout(Io& io, Time& time_s, Round& round, S& s) {
  io.f64("server clock", time_s);
  io.i64("server round", round);
  named_state_field(io, s);
}

// An island's training state, the first fields of both the simulator's "island.K" section and
// a real run's "island" section (docs/checkpoints.md): tensor params; i64 inner-optimizer
// steps; tensors optimizer state; sampler i64 epoch, u64 position; the algorithm's named
// state; runtime i64 steps, f64 loss sum, i64 losses. T: IslandCheckpoint or
// run::IslandProcessCheckpoint (the same field names), const when written.
template <class Io, class T>
void island_training_layout(Io& io, T& s) {
  tensor_field(io, s.params);
  io.i64("optimizer steps", s.optimizer_steps);
  tensors_field(io, s.optimizer_state);
  io.i64("sampler epoch", s.sampler.epoch);
  io.u64("sampler position", s.sampler.pos);
  named_state_field(io, s.algorithm);
  io.i64("runtime steps", s.runtime.steps);
  io.f64("runtime loss sum", s.runtime.loss_acc);
  io.i64("runtime losses", s.runtime.loss_n);
}

// A section named `name` holding `layout(out, args...)`.
template <class Layout, class... Args>
checkpoint::Section write_section(std::string name, Layout&& layout, Args&... args) {
  bytes::ByteWriter w;
  bytes::Out<std::string> out(w);
  layout(out, args...);
  return {std::move(name), std::move(w).bytes()};
}

// Reads section `name` of `file` with `layout(in, args...)`: kCorrupt "WHAT: malformed section
// 'NAME'" when it is malformed, has bytes left over or `valid()` says no; "WHAT: no section
// 'NAME'" when it is missing.
template <class Layout, class... Args>
Status read_section(const checkpoint::Checkpoint& file, const std::string& what, const std::string& name,
                    Layout&& layout, Args&... args) {
  const std::string* bytes = file.find(name);
  if (bytes == nullptr) return corrupt(what + ": no section '" + name + "'");
  bytes::Reader r(*bytes, "section");
  bytes::In in(r);
  layout(in, args...);
  return r.done() ? Status::ok() : corrupt(what + ": malformed section '" + name + "'");
}

}  // namespace atl::core
