// The outer-loop algorithm interface. An algorithm is written once against IslandContext
// (flat parameter/gradient buffers and a transport::Group) and runs unchanged in the
// simulator and in real multi-process runs.
//
// The island loop (src/core/island_loop.h) calls the hooks in this order:
//
//   setup(ctx)                                   once, before the first step
//   steps = planned_steps(configured)            after setup
//   for step in 1..steps:
//     before_step(ctx, step)                     fedavg: pull the global model
//     forward/backward -> ctx.grads
//     ctx.lr = the step's learning rate
//     after_backward(ctx, step)                  ddp: average gradients
//     clip; inner_step(ctx, step) if replaces_inner_step(), else the inner optimizer
//     after_inner_step(ctx, step)                diloco: every H steps, outer sync
//   finish(ctx)
// A resumed run (checkpoints, below) calls setup(ctx), then load(ctx, state), and starts
// the loop after the checkpoint's step.
//
// One Algorithm object per island, used only by that island's thread. Hooks that
// communicate block on the group (in the simulator that hands the turn to other islands).
// Algorithms never include zmq/gloo, never read files or YAML.
#pragma once

#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/catalog.h"
#include "algorithms/options.h"
#include "compression/pipeline.h"
#include "src/base/named_state.h"
#include "transport/group.h"
#include "transport/outer_server.h"

namespace atl::algorithms {

// One synchronisation as seen by one island; becomes a metrics record.
struct RoundInfo {
  int64_t round = 0;           // 1-based outer step count of this island
  int64_t step = 0;            // inner step at which it happened
  int contributors = 0;        // islands whose data made it into the result
  int members = 0;             // live members when the round started
  uint64_t bytes_sent = 0;     // by this island during the round (counted by the group)
  uint64_t bytes_received = 0;
  uint64_t raw_bytes_sent = 0; // fp32 size of what was sent, before encoding
  double outer_grad_norm = 0;  // ||averaged pseudo-gradient||_2 (0 where not applicable)
};

// Time as the island experiences it: virtual seconds in the simulator (advanced by the
// compute and network models), wall-clock seconds since the start in real runs.
class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual double now_s() const = 0;
  // Idles until `t` (no-op when t <= now). In the simulator this is idle virtual time.
  virtual void sleep_until_s(double t) = 0;
};

// Where one model parameter lives in the flat buffer (from the model's layout; algorithms
// never see src/models).
struct ParamRange {
  int64_t offset = 0;  // first element in params
  int64_t numel = 0;
  int block = -1;      // transformer block index; -1 for embeddings, final norm, head
  std::vector<int64_t> shape;  // the tensor's shape (product = numel); empty = [numel]
  int module = 0;      // the module it belongs to (a modular model: shared between the paths
                       // through it); 0 for a model that is not modular
};

class SharedTensors;  // algorithms/shared_tensors.h
class OuterShards;    // algorithms/outer_optimizer.h

struct IslandContext {
  int island = 0;                            // this island's id
  at::Tensor params;                         // [N] float32: the model's parameters (views)
  at::Tensor grads;                          // [N] float32: the model's gradients (views)
  transport::Group* group = nullptr;         // not owned
  const compression::Pipeline* codec = nullptr;  // for outer exchanges; not owned
  int64_t shard_size = 0;                    // training examples on this island
  std::function<void(const RoundInfo&)> on_round;  // may be empty
  double speed = 1.0;                        // relative compute speed from the cost model
                                             // (compute.speeds; 1 in real runs)
  TimeSource* time = nullptr;                // never null while the island loop runs
  std::vector<ParamRange> layout;            // every parameter, ascending offsets; empty =
                                             // one range without a block (tests)
  double lr = 0;                             // the current inner step's learning rate (set by
                                             // the island loop before after_backward)
  int path = 0;                              // the path this island trains (a run of several
                                             // paths holds one parameter vector per path, and
                                             // `params` is this island's); 0 otherwise
  // Fewer islands than paths: called by the algorithm when this island takes up
  // `path` (after it set `params` and `path`): the runtime points the island's data at the
  // path's shard, after the first `examples` examples of that shard's stream, sets
  // shard_size, and with `fresh_inner` starts the inner optimizer afresh. May be empty
  // (tests): then only `path` changes.
  std::function<void(int path, int64_t examples, bool fresh_inner)> switch_path;
  // Called by an algorithm whose checkpoints are cut at server interactions
  // (CheckpointCut::kServerTime) just before each push or pull: a due checkpoint may fall
  // there (the simulator). May be empty (real runs, tests).
  std::function<void()> before_server_call;
  // Fewer islands than paths: every path's training sequences now, the weights of
  // `weighting: shard_size` (a re-routing changes them; not owned). Null:
  // AlgorithmOptions::shard_sizes.
  const std::vector<int64_t>* path_shard_sizes = nullptr;
  // The simulator: where state that islands in step hold bitwise alike is held once
  // (algorithms/shared_tensors.h). Null in real runs and tests.
  SharedTensors* shared = nullptr;
  // Real runs of islands of several ranks with a sharded outer exchange: where each rank
  // keeps its shard of the outer optimizers' state (algorithms/outer_optimizer.h; an
  // algorithm passes it to its optimizers in setup). Null otherwise.
  OuterShards* outer_shards = nullptr;
};

// An island's algorithm state in a checkpoint (docs/checkpoints.md "Named state"): what
// state() returns at a step boundary and load() takes back, by name (e.g. "round",
// "outer.momentum", "anchor"); each algorithm documents its names beside its state(). The
// checkpoint stores the entries as they are, tensors with their dtype and shape (undefined
// ones too).
using AlgorithmCheckpoint = NamedState;
// What a live island hands to a joiner besides the global model (see Algorithm): a named
// subset of its checkpoint state (the same names for the same values).
using AlgorithmState = NamedState;

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string name() const = 0;
  virtual void setup(IslandContext& ctx) = 0;
  // Inner steps this island will run; `configured` is train.steps.
  virtual int64_t planned_steps(int64_t configured) { return configured; }
  virtual void before_step(IslandContext& ctx, int64_t step) {}
  virtual void after_backward(IslandContext& ctx, int64_t step) {}
  // An algorithm that updates the parameters itself (DeMo: decoupled momentum and a sign
  // step from the exchanged components) says so here; the island loop then calls
  // inner_step() instead of the inner optimizer, after clipping, with ctx.lr set.
  virtual bool replaces_inner_step() const { return false; }
  virtual void inner_step(IslandContext& ctx, int64_t step) {}
  virtual void after_inner_step(IslandContext& ctx, int64_t step) {}
  virtual void finish(IslandContext& ctx) {}
  // The model this island regards as "the" model (evaluated and saved): the global copy
  // (diloco: the anchor; ddp: the parameters). [N] float32.
  virtual at::Tensor global_params() const = 0;
  // Whether the global model lives in the server role (fedavg) rather than on the islands.
  virtual bool global_on_server() const { return false; }
  // Fewer islands than paths (every island keeps every module's global parameters): path
  // `path`'s global model [N], composed from this island's copies of the path's modules (the
  // modules after their last outer step), after setup. Undefined where
  // the island holds no other path than its own (every other case). A new tensor.
  virtual at::Tensor path_global_params(int path) const { return {}; }

  // State hand-over to an island that joins a running group (a rejoin after a failure, or a
  // new island). The joiner's parameters are set to the global model, its algorithm is made
  // and set up on them, and import_state() receives what export_state() of a live island
  // returned at one of that island's step boundaries. The inner optimizer state is never
  // handed over (a joiner starts it fresh). Default: nothing beyond the global model.
  virtual AlgorithmState export_state() const { return {}; }
  virtual void import_state(IslandContext& ctx, const AlgorithmState& state) {}
  // Whether a hand-over may be made at this step boundary. False while this island waits on
  // an exchange whose result a joiner could not apply (it joins from the next collective on):
  // the donor then hands over at a later boundary. Default: any boundary.
  virtual bool can_hand_over() const { return true; }

  // Checkpoints (docs/checkpoints.md). Exact resume: a run stopped after a checkpoint of
  // step S and resumed from it continues bitwise as if it had never stopped. The resumed
  // island's parameters are set to this island's at S, its algorithm is made afresh and set
  // up on them, then load() receives what state() returned at the boundary of step S; the
  // island loop goes on with step S + 1. Checkpoints are taken only at boundaries where
  // every island of the run has posted its exchanges and they are complete; one may still be
  // uncollected (diloco with overlap): state() saves what it needs of it and load() takes
  // its handle back from ctx.group->resume_in_flight().
  //
  // Whether this step boundary may hold a checkpoint: false while an exchange of this island
  // is in flight (streaming_diloco between a fragment's send and its receive). A checkpoint
  // that is due then falls at the next boundary where it is true; it must be true at the
  // same boundaries on every island. Default: every boundary.
  virtual bool can_checkpoint() const { return true; }
  // Where checkpoints are cut. kStep (default): at a step boundary every island reaches (the
  // step counts toward checkpoint.every). kServerRound (fedavg, docs/checkpoints.md "fedavg: a
  // cut at a server round"): checkpoint_position() is the round this island pulls next, at
  // the boundaries where its next action is that pull, and -1 at every other boundary.
  // kServerTime (async_local_sgd, "async_local_sgd: a cut in virtual time"): the virtual time
  // of this island's next server interaction when it comes before any further compute, -1
  // otherwise; the algorithm calls ctx.before_server_call before each one.
  // Default: the algorithm's catalog row (AlgorithmTraits::checkpoint_cut; kStep for a name
  // without one), where validation reads it too.
  virtual CheckpointCut checkpoint_cut() const;
  // The position of the boundary after `step` (0: before the first step) in the units above;
  // negative: no checkpoint here. Default: the step.
  virtual double checkpoint_position(int64_t step) const { return static_cast<double>(step); }
  virtual AlgorithmCheckpoint state() const { return {}; }
  virtual void load(IslandContext& ctx, const AlgorithmCheckpoint& state) {}
  // Real runs, before state(): waits until the exchange that state() saves as in flight
  // (posted by every island, collected later: diloco with overlap) is complete here, and
  // returns its result, which the process saves and its resumed group's resume_in_flight()
  // hands back (in the simulator the hub saves its own). nullopt: nothing is in flight.
  // Default: nothing ever is at a checkpoint.
  virtual std::optional<transport::CollectiveResult> wait_in_flight() { return std::nullopt; }
};

// Registry (algorithms/registry.cpp). Throws atl::UserError for an unknown name, listing
// the valid names.
std::unique_ptr<Algorithm> make_algorithm(const AlgorithmOptions& options, int island);
// A round the server role closed, as its on_round callback sees it.
struct ServerRound {
  int64_t round = 0;   // fedavg: rounds closed so far (1-based); async_local_sgd: local steps
                       // applied so far, summed over islands
  at::Tensor global;   // the global model after it (the server's buffer: read, do not keep
                       // beyond the next call without cloning)
  double at_s = NAN;   // fedavg: when it closed, on the clock of OuterServer::on_time; NaN:
                       // the server does not know (async_local_sgd)
  // fedavg only (selected < 0 for other servers), docs/algorithms.md §7:
  int selected = -1;           // clients selected for the round
  std::vector<int> delivered;  // whose results were aggregated (or would have been: skipped)
  std::vector<int> lost;       // selected, but the membership lost them before they delivered
  std::vector<int> late;       // selected and live, but not in by the round's deadline
  bool skipped = false;        // fewer than algorithm.min_clients delivered: model unchanged
};


// The server role of `options.name`, or nullptr when it has none. `initial` is θ_0 [N].
// `on_round` is called each time the server closes a round (async_local_sgd: after every
// arrival).
std::unique_ptr<transport::OuterServer> make_server(const AlgorithmOptions& options, const at::Tensor& initial,
                                                    std::function<void(const ServerRound&)> on_round);

}  // namespace atl::algorithms
