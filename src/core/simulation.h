// `atoll simulate` as a composition (docs/simulator.md, docs/architecture.md "The run
// layer"): N island runtimes on the cooperative scheduler's threads, on the virtual clock, over
// the in-process hub, with the run-level objects both modes share (core::Roles,
// core::Handover, core::ServerHost, core::CheckpointSchedule, core::CheckpointGathering,
// core::IslandTraining) and the simulator's own extras: the event injector (kills, rejoins,
// additions; partitions are the network model's) and the cost model.
//
// Internal to src/core/simulator.cpp and src/core/sim_islands.cpp. Everything here is touched
// only by the island thread holding the scheduler's turn (or by the main thread before and
// after the scheduler runs).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/catalog.h"
#include "algorithms/shared_tensors.h"
#include "compression/pipeline.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/config/config.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/cost_model.h"
#include "src/core/eval_summary.h"
#include "src/core/evaluator.h"
#include "src/core/handover.h"
#include "src/core/island_parts.h"
#include "src/core/island_runtime.h"
#include "src/core/progress.h"
#include "src/core/roles.h"
#include "src/core/run_dir.h"
#include "src/core/server_host.h"
#include "src/core/sim_checkpoint.h"
#include "src/core/simulator.h"
#include "transport/inproc/inproc_group.h"
#include "transport/inproc/scheduler.h"
#include "transport/network_model.h"

namespace atl::core::sim {

// An island's clock as its algorithm sees it: the scheduler's virtual time.
class VirtualTime final : public algorithms::TimeSource {
 public:
  VirtualTime(transport::Scheduler& scheduler, int id) : scheduler_(scheduler), id_(id) {}
  double now_s() const override { return scheduler_.time(id_); }
  void sleep_until_s(double t) override {
    const double now = now_s();
    if (t <= now) return;
    slept_s += t - now;
    scheduler_.advance(id_, t);
  }
  double slept_s = 0;  // idle time the algorithm chose (e.g. a grace window)

 private:
  transport::Scheduler& scheduler_;
  int id_;
};

// Everything one simulated island owns.
struct Island {
  IslandParts parts;
  std::unique_ptr<transport::Group> group;
  std::unique_ptr<VirtualTime> time;
  std::unique_ptr<IslandRuntime> runtime;  // context, loop, records (src/core/island_runtime.h)
  bool planned = false;  // its planned steps are in the progress total
  int64_t rounds = 0;
  double compute_s = 0;  // virtual seconds spent computing inner steps
  bool alive = true;      // a member (not killed, not waiting to be added)
  bool finished = false;  // ran all its steps
  bool gone = false;      // its thread is done (or it had finished before a resume): no cut waits for it
  CheckpointSchedule checkpoints;  // its checkpoint cuts still due
  // At the previous round record: to report per-round compute / comm / idle.
  double last_compute_s = 0, last_comm_s = 0, last_waited_s = 0, last_slept_s = 0;
};

// Thrown by an island whose training loss is not finite; stops the whole simulation.
struct Diverged : std::runtime_error {
  Diverged(int island, int64_t step, double loss)
      : std::runtime_error("island " + std::to_string(island) + ": training loss is " + std::to_string(loss) +
                           " at step " + std::to_string(step)),
        island(island), step(step) {}
  int island;
  int64_t step;
};

// Thrown inside a killed island's thread to unwind its loop.
struct IslandKilled {};

double seconds_since(std::chrono::steady_clock::time_point t0);

// The event injector's plan and its accounting of membership (islands.events): the kills of
// each island, the times it (re)joins, the joiners waiting for a hand-over, and when each
// island became a member and for how long it has been one.
struct Membership {
  struct Kill {
    config::IslandEvent event;
    int64_t index = 0;  // in islands.events
    bool fired = false;
  };
  // A joiner's hand-over on its way: the hub carries it, its bytes on the donor's link.
  struct Arriving {
    bool ready = false;
    double arrival = 0;  // when the hand-over has crossed the link
    Handover handover;
  };
  Membership() = default;
  Membership(const config::Config& config, int islands);

  std::vector<std::vector<Kill>> kills;
  std::vector<std::vector<double>> joins;  // ascending join times of each island
  bool joins_planned = false;
  std::vector<double> member_since, member_s;
  std::vector<double> end_time;  // when each island last left or finished
  std::vector<int> pending;      // joiners waiting for a hand-over
  std::vector<Arriving> handovers;
  // Joiners between their join time and their first step as members (waiting for a
  // hand-over, or for its arrival): their state is no checkpoint's.
  std::vector<char> joining;
};

// What the run's eval records add up to, and when the target loss was first reached.
struct RunEvals {
  EvalSummary evals;
  double target_time = NAN, target_bytes = NAN;
  int64_t target_step = -1;
};

class Simulation {
 public:
  Simulation(const config::Config& config, const SimulateOptions& options);
  RunSummary run();

 private:
  // Set-up (simulator.cpp).
  void open_run_dir();
  void make_server();
  void make_checkpoints();
  void restore(const SimCheckpoint& c);
  void evaluate_start();
  RunSummary finish(RunSummary summary);

  // The islands (sim_islands.cpp).
  IslandHost make_host(int i);
  std::unique_ptr<transport::Group> make_group(int i);
  void make_runtime(int i);
  void share_gradient(IslandParts& parts);
  void island_thread(int i);
  // A dead (or not yet added) island comes (back) at its next join time after now: waits for
  // a hand-over and joins. False when it has no join left or nobody can hand its state over.
  bool rejoin(int i, size_t& next_join);
  void after_compute(int i);
  void after_step(int i, int64_t step, int64_t total, double loss);
  RoundTimes round_times(int i);
  [[noreturn]] void die(int i, Membership::Kill& kill, const char* why);
  void record_membership(int i, const char* change, const char* why);

  // Roles, hand-overs, evaluation, checkpoints (sim_islands.cpp).
  std::vector<int> running() const;  // alive and unfinished, ascending
  int evaluator_island() const;      // the lowest running island; -1: none
  bool lead_for_evals(int i) const { return islands_[i].alive && roles_.leads(i, running()); }
  void hand_over(int donor, int64_t step, const std::vector<int>& live);
  uint64_t total_bytes() const;
  void after_eval(int64_t step, const EvalResult& path_or_eval, double sim_time);
  void server_evaluate(int64_t step, const at::Tensor& params, double sim_time);
  IslandCheckpoint island_state(int i);
  void write_checkpoint(int64_t step);
  // Island i at its boundary after `step` (of `total`; a server-cut algorithm also before each
  // server call): marks every cut due there and waits until each is done.
  void maybe_checkpoint(int i, int64_t step, int64_t total);
  // Writes (or skips) the cuts every island taking part has reached; after a mark, a death, an
  // island's end.
  void complete_checkpoints();

  const config::Config& config_;
  const SimulateOptions options_;
  const std::chrono::steady_clock::time_point t0_;
  int threads_ = 0;
  int k_ = 0;  // islands at the start
  int n_ = 0;  // with those `add` events bring in later: ids k..n-1
  std::string ckpt_path_;
  std::optional<SimCheckpoint> resumed_;
  RunData data_;
  algorithms::AlgorithmOptions algo_options_;
  compression::Pipeline codec_;
  // The scheduler and the hub outlive the islands, whose algorithms may hold handles into it.
  std::unique_ptr<transport::Scheduler> scheduler_;
  std::unique_ptr<transport::InprocHub> hub_;
  algorithms::SharedTensors shared_tensors_;  // docs/simulator.md "Memory"
  // With AlgorithmTraits::step_local_gradient: one gradient buffer per model size, which the
  // islands share, since they compute one at a time (docs/simulator.md "Memory").
  bool shares_gradient_ = false;
  std::map<int64_t, at::Tensor> gradients_;
  at::Tensor rank_sum_;  // forward_backward_ranks' sum of an island's shares, for every island
  std::vector<Island> islands_;
  std::unique_ptr<Evaluator> evaluator_;
  int64_t n_params_ = 0;
  transport::NetworkModel network_;
  std::unique_ptr<CostModel> cost_;
  std::optional<RunDir> dir_;
  std::unique_ptr<checkpoint::CheckpointDir> checkpoints_;
  std::unique_ptr<Progress> progress_;
  ProgressState state_;
  RunEvals evals_;
  std::unique_ptr<ServerHost> server_;
  Membership membership_;
  const Roles roles_;
  std::optional<CheckpointGathering> gathering_;
  // What checkpoint.every asked for and what was written (summary.json, the end line).
  int64_t checkpoints_asked_ = 0, checkpoints_written_ = 0;
};

}  // namespace atl::core::sim
