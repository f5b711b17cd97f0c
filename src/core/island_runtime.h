// One island's part of a run, the same in `atoll simulate` (one per simulated island, on its
// scheduler thread) and `atoll island` (one per process). It
//   - fills the algorithm's IslandContext and runs the island loop (src/core/island_loop.h);
//   - writes the island's metrics records: train, round, eval, rejoin, island_end (one
//     builder per record type, src/core/records.h; schema in docs/metrics.md);
//   - evaluates the global model while it is the lead (src/core/eval_role.h);
//   - imports a state hand-over when it joins a running run (join());
//   - writes final_params.bin when asked (write_final_params()).
// The host (the simulator, or the island process) supplies the clock, the group, the record
// sink, the membership (is this island the lead? was a step's eval recorded?) and hooks at
// the step boundaries for what only it does: the simulator's cost model, kills, scheduling
// and progress; the process's hand-over donor and progress.
//
// Several parameter vectors (paths, modules shared between paths; docs/architecture.md "Runs
// of several models"): an island trains one path's model and evaluates one global vector,
// except that with fewer islands than paths (eval_path kEveryPath) it evaluates and writes
// every path's global model, composed by the algorithm from its module copies
// (Algorithm::path_global_params). Evaluation records carry the path, final parameters are one
// file per path, and a hand-over carries the donor's path's state.
//
// Not thread-safe: used by the island's own thread, like the Algorithm it drives.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/config/config.h"
#include "src/core/eval_role.h"
#include "src/core/evaluator.h"
#include "src/core/handover.h"
#include "src/core/island_loop.h"
#include "src/core/island_parts.h"
#include "src/core/records.h"
#include "src/core/roles.h"

namespace atl::core {

// What the host supplies. Hooks marked "may be empty" are optional.
struct IslandHost {
  // The algorithm's clock: virtual seconds in the simulator, wall seconds in real runs.
  algorithms::TimeSource* time = nullptr;
  // The island's ranks (islands.ranks, docs/ranks.md). The simulator sets share.ranks and the
  // runtime computes every rank's share of a step itself (forward_backward_ranks). A real
  // rank sets its own share and `reduce_ranks`, which averages the grads and the loss over
  // the island's ranks (c10d) and returns the loss; and `algorithm_time`, the clock the
  // algorithm reads when it is not `time` (rank 0's readings, which every rank must see
  // alike). May be empty / null.
  RankShare share;
  // Where forward_backward_ranks sums the shares (null: the runtime's own buffer). The
  // simulator's islands compute one at a time and the sum lives within one step, so they
  // share one (docs/simulator.md "Memory").
  at::Tensor* rank_sum = nullptr;
  std::function<double(at::Tensor& grads, double loss)> reduce_ranks;
  // A rank > 0, which does not evaluate (no evaluator): its own copy of the evaluator for a
  // re-routing's scores (Rerouter::run), so that it re-routes as its rank 0 does. Null
  // otherwise.
  Evaluator* scorer = nullptr;
  algorithms::TimeSource* algorithm_time = nullptr;
  // Records' sim_time_s is time->now_s() (the simulator); NaN otherwise.
  bool virtual_clock = false;
  // The simulator's state held once for the islands in step (IslandContext::shared); null
  // in real runs.
  algorithms::SharedTensors* shared = nullptr;
  // A real run's island of several ranks with a sharded outer exchange: where the ranks keep
  // their shards of the outer optimizers' state (IslandContext::outer_shards); null otherwise.
  algorithms::OuterShards* outer_shards = nullptr;
  // Wall seconds since the run (process) started: records' wall_time_s.
  std::function<double()> wall_s;
  // Appends one record (a JSON object) to the run's metrics.
  std::function<void(const std::string& json)> record;

  // The lead role (EvalRole::Hooks). is_lead: no live island with a lower id holds the
  // model (several paths: among the islands of this island's eval_path, each path has its
  // lead). eval_recorded: the run's metrics hold an eval record of the step (several paths:
  // this path's path_eval record). after_eval: the record was written (mark the step, track
  // the summary; several paths: r.path >= 0, and the host writes the routed eval record once every path's is in,
  // EvalSummary::add_path; may be empty). wait: blocks until the membership may have changed
  // or the deadline (time->now_s()'s clock) passed.
  std::function<bool()> is_lead;
  std::function<bool(int64_t step)> eval_recorded;
  std::function<void(int64_t step, const EvalResult& r)> after_eval;
  std::function<void(double deadline_s)> wait;
  // How long an eval step kept for the lead waits before this island evaluates it, and how
  // often (at most) kept steps are looked at between eval steps (EvalRole).
  double eval_patience_s = 30;
  double eval_settle_every_s = 1.0;
  // eval records' bytes_sent_total.
  std::function<uint64_t()> eval_bytes;

  // Round records' timings, measured by the host since its previous call.
  std::function<RoundTimes()> round_times;
  std::function<void(const algorithms::RoundInfo&)> after_round;  // may be empty
  // Step boundaries, in this order around each inner step's records; each may be empty.
  std::function<void(int64_t step)> after_compute;  // see IslandLoop::after_compute
  bool compute_ends_after_step = false;             // see IslandLoop::compute_ends_after_step
  std::function<void(int64_t step, int64_t total, double loss)> before_records;
  std::function<void(int64_t step, int64_t total, double loss, double lr)> after_step;
  // After the algorithm's setup (and load / import), before the first step it runs: the
  // boundary after step `step` (0 on a fresh start). May be empty.
  std::function<void(int64_t step)> after_setup;
};

class IslandRuntime {
 public:
  // `parts` (the model, sampler, inner optimizer and algorithm), `group`, `codec` and
  // `evaluator` are not owned and must outlive the runtime; `evaluator` may be null when
  // the global model lives in the server role.
  IslandRuntime(int island, IslandParts& parts, const config::TrainConfig& train, transport::Group* group,
                const compression::Pipeline* codec, int64_t shard_size, Evaluator* evaluator, bool classifier,
                IslandHost host);

  int island() const { return island_; }
  algorithms::IslandContext& context() { return context_; }
  // Inner steps done (the donor's step for a joiner that has not run one yet).
  int64_t steps() const { return steps_; }

  // Step 0: the initial model is evaluated by the lead (a fresh start, not a joiner).
  void evaluate_start();
  // This island joins a running run: after the parts' algorithm and inner optimizer were
  // made afresh (the simulator) or for the first time (a process), and before run(): the
  // model takes the global parameters, the algorithm the donor's state after setup, and
  // the loop starts after the donor's step. Writes the rejoin record.
  void join(Handover state, transport::Group* group);
  // What the runtime carries from one step to the next, for checkpoints
  // (docs/checkpoints.md): the steps done and the training loss summed since the last
  // train record.
  struct Saved {
    int64_t steps = 0;
    double loss_acc = 0;
    int64_t loss_n = 0;
  };
  Saved saved() const { return {steps_, loss_acc_, loss_n_}; }
  // This island continues a run from a checkpoint: after the parts' model, sampler and inner
  // optimizer were restored, before run(). The loop starts after `state.steps`, and the
  // algorithm loads `algorithm` right after its setup. No record is written. Without
  // `algorithm` (an island dead at the checkpoint) only the counts are restored: it runs
  // again only after join().
  void resume(const Saved& state, std::optional<algorithms::AlgorithmCheckpoint> algorithm);
  // Runs the island loop to its last step. Exceptions from the algorithm and the hooks
  // propagate (the simulator unwinds a killed island this way).
  void run();
  // After run(): evaluates or waits for the eval steps it kept, then writes island_end.
  void finish();
  // The algorithm's global model to `file` (final_params.bin, src/core/params_file.h); with
  // `path` >= 0, path `path`'s global model (one of held_paths()).
  void write_final_params(const std::string& file, int path = -1) const;
  // The final parameter files this island writes at its end, by the rule of src/core/roles.h
  // on `running` (the mode's view, ascending ids): final_params.bin when it leads the run and
  // the global model lives on the islands, and final_params_name(p) for each path p it holds
  // when it leads its path. Each file (path -1: final_params.bin) is written into `dir` only
  // when `claim(path)` says no other island has written it (the simulator: a set; a real run:
  // the coordinator's store), and `wrote(path)` follows the write. A failed write throws.
  void write_final_outputs(const std::string& dir, const Roles& roles, const std::vector<int>& running,
                           const std::function<bool(int path)>& claim, const std::function<void(int path)>& wrote) const;
  // The paths whose global model this island holds: its own (eval_path), or every path with
  // fewer islands than paths (kEveryPath). Empty for a run of one model.
  std::vector<int> held_paths() const;

  RecordTime now() const;

 private:
  void on_step(int64_t step, int64_t total, double loss, double lr);
  void evaluate(int64_t step, const at::Tensor& global);
  // What the lead evaluates at an eval step: `global`, or with kEveryPath every path's global
  // model, [P * N] path after path (paths(): the initial model, `global`, for each).
  at::Tensor eval_models(const at::Tensor& global, bool initial = false) const;
  void reshard(int64_t step);
  // The evaluator that scores a re-routing and knows the paths: the island's, else the
  // host's scorer.
  Evaluator* scorer() const { return evaluator_ != nullptr ? evaluator_ : host_.scorer; }

  const int island_;
  IslandParts& parts_;
  const config::TrainConfig& train_;
  Evaluator* evaluator_;
  const bool classifier_;
  IslandHost host_;
  algorithms::IslandContext context_;
  IslandLoop loop_;
  std::unique_ptr<EvalRole> eval_role_;
  std::optional<Handover> joining_;
  std::optional<algorithms::AlgorithmCheckpoint> resuming_;
  std::vector<int64_t> path_sizes_;  // fewer islands than paths, after a re-routing:
                                     // every path's shard size (context_.path_shard_sizes)
  at::Tensor rank_sum_;  // the sum of the ranks' gradients (share.ranks > 1) without host.rank_sum
  int64_t steps_ = 0;
  double loss_acc_ = 0;
  int64_t loss_n_ = 0;
};

}  // namespace atl::core
