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

// One island at the checkpoint's step boundary.
struct IslandCheckpoint {
  at::Tensor params;                      // [N] float32: the model's parameters
  int64_t optimizer_steps = 0;            // inner optimizer: step count and state tensors
  std::vector<at::Tensor> optimizer_state;
  data::Sampler::Position sampler;        // where its next batch starts
  algorithms::AlgorithmCheckpoint algorithm;
  IslandRuntime::Saved runtime;
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
// checkpoint: section's keep and dir, and the failed-write policies (checkpoint.on_failure,
// run.metrics_on_failure) left out (they may differ between the two runs).
std::string resume_hash(const config::Config& config);

std::vector<checkpoint::Section> encode_sim_checkpoint(const SimCheckpoint& c);
// kCorrupt (one line, prefixed by `what`) for a missing or malformed section.
StatusOr<SimCheckpoint> decode_sim_checkpoint(const checkpoint::Checkpoint& file, const std::string& what);
// Only the "run" and "global" sections (atoll export): step and global model.
StatusOr<SimCheckpoint> decode_global(const checkpoint::Checkpoint& file, const std::string& what);

// Tensors in section payloads: src/core/tensor_codec.h.

// A collective's result (the simulator's "inflight" section, a real run's in-flight
// exchange): u8 status code, str status message, i64s contributors, f64 weight sum.
void put_result(bytes::ByteWriter& w, const transport::CollectiveResult& result);
transport::CollectiveResult get_result(bytes::Reader& r);  // r not ok() on bad input

// A server role's state (the "server" section of the simulator's checkpoints and of a real
// run's coordinator running state, docs/checkpoints.md): f64 its clock at the save, i64 the
// latest round it reported, i64s counters, u64 count + f64 reals, tensors.
void put_server_state(bytes::ByteWriter& w, double time_s, int64_t round, const transport::OuterServer::State& s);
void get_server_state(bytes::Reader& r, double& time_s, int64_t& round, transport::OuterServer::State& s);

// An island's training state, the first fields of both the simulator's "island.K" section and
// a real run's "island" section (docs/checkpoints.md): tensor params; i64 inner-optimizer
// steps; tensors optimizer state; sampler i64 epoch, u64 position; algorithm i64s counters and
// tensors; runtime i64 steps, f64 loss sum, i64 losses. T: IslandCheckpoint or
// run::IslandProcessCheckpoint (the same field names).
template <class T>
void put_island_training(bytes::ByteWriter& w, const T& s) {
  put_tensor(w, s.params);
  w.i64(s.optimizer_steps);
  put_tensors(w, s.optimizer_state);
  w.i64(s.sampler.epoch);
  w.u64(s.sampler.pos);
  w.i64s(s.algorithm.counters);
  put_tensors(w, s.algorithm.tensors);
  w.i64(s.runtime.steps);
  w.f64(s.runtime.loss_acc);
  w.i64(s.runtime.loss_n);
}
template <class T>
void get_island_training(bytes::Reader& r, T& s) {
  s.params = get_tensor(r);
  s.optimizer_steps = r.i64();
  s.optimizer_state = get_tensors(r);
  s.sampler.epoch = r.i64();
  s.sampler.pos = r.u64();
  s.algorithm.counters = r.i64s();
  s.algorithm.tensors = get_tensors(r);
  s.runtime.steps = r.i64();
  s.runtime.loss_acc = r.f64();
  s.runtime.loss_n = r.i64();
}

}  // namespace atl::core
