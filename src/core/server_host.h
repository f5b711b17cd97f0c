// The host of a server role (fedavg, async_local_sgd), one for both modes
// (docs/architecture.md "Server host"): the simulator runs it beside its hub, a real run in
// the coordinator. It owns the algorithm's OuterServer, the schedule of its evaluations
// (ServerEvalSchedule), its latest global model and round, and says what to record and
// evaluate after each round it closes; the mode brings its clock and its sinks.
//
// Not thread-safe: the OuterServer's own caller runs it (the simulator's pushing island, the
// coordinator's loop thread).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "algorithms/algorithm.h"
#include "src/core/components.h"
#include "src/core/records.h"
#include "transport/outer_server.h"

namespace atl::core {

class ServerHost {
 public:
  struct Hooks {
    // The time of a closed round on the mode's clock, from the round's own (r.at_s, NaN when
    // the server does not know it): the simulator's virtual seconds; NaN in real runs.
    std::function<double(const algorithms::ServerRound& r)> round_time;
    // Wall seconds since the run started (the records' wall_time_s).
    std::function<double()> wall_s;
    // A server_round record (fedavg's rounds, docs/metrics.md).
    std::function<void(const std::string& json)> record;
    // Evaluate the global model `global` under step label `step` at `at_s` (the mode's clock):
    // the mode evaluates and records it.
    std::function<void(int64_t step, const at::Tensor& global, double at_s)> evaluate;
    // After each closed round, once the host's round, time and global model are its (may be empty).
    std::function<void(const algorithms::ServerRound& r)> after_round;
  };

  // The host of `options`' server role, or nullptr when the algorithm has none. `initial`:
  // θ_0 [N]; `train_examples`: the training split's size (the eval schedule's).
  static std::unique_ptr<ServerHost> make(const algorithms::AlgorithmOptions& options, const config::TrainConfig& train,
                                          int64_t train_examples, const at::Tensor& initial, Hooks hooks);

  transport::OuterServer& server() { return *server_; }
  // The latest closed round, its global model (undefined before the first) and its time.
  int64_t round() const { return round_; }
  const at::Tensor& global() const { return global_; }
  double time() const { return time_; }
  // Rounds count outer rounds (fedavg) rather than applied steps (async_local_sgd).
  bool counts_rounds() const { return schedule_.counts_rounds(); }

  // The server role's state to save (tensors copied), and the round it was saved after.
  transport::OuterServer::State save() const;
  // Back to a saved state after round `round` at time `time_s` (a resume, a coordinator
  // restart): the server's state, the eval schedule, the global model it serves.
  void load(const transport::OuterServer::State& state, int64_t round, double time_s = 0);
  // The initial model's evaluation (step 0) of a fresh start.
  void evaluate_start(const at::Tensor& initial) { hooks_.evaluate(0, initial, 0.0); }
  // The step label of the latest round, whose evaluation is the run's final one; -1 before
  // the first round.
  int64_t final_step() const { return global_.defined() ? schedule_.label(round_) : -1; }
  // Evaluates the latest global model under final_step(), even when churn kept the last round
  // from being the planned one. Nothing before the first round.
  void evaluate_final();

 private:
  ServerHost(const algorithms::AlgorithmOptions& options, const config::TrainConfig& train, int64_t train_examples,
             Hooks hooks);
  void on_round(const algorithms::ServerRound& r);

  Hooks hooks_;
  ServerEvalSchedule schedule_;
  std::unique_ptr<transport::OuterServer> server_;
  at::Tensor global_;
  int64_t round_ = 0;
  double time_ = 0;
};

}  // namespace atl::core
