// Runs real algorithms through the real island loop, scheduler and in-process group, on
// quadratic objectives whose exact trajectories a test can recompute by hand:
//   f_i(θ) = 0.5 * ||θ - c_i||^2   so   ∇f_i(θ) = θ - c_i   (c_i = island i's target)
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/shared_tensors.h"
#include "src/config/config.h"
#include "src/core/island_loop.h"
#include "src/train/inner_optimizer.h"
#include "transport/inproc/inproc_group.h"
#include "transport/inproc/scheduler.h"

namespace atl::testing {

struct QuadraticRun {
  std::vector<at::Tensor> params;          // final θ_i
  std::vector<at::Tensor> globals;         // final algorithm.global_params() per island
  std::vector<transport::ByteCounters> bytes;
  std::vector<std::vector<algorithms::RoundInfo>> rounds;
  at::Tensor server_global;                // fedavg: the server's model after the last round
  std::vector<int64_t> server_rounds;      // every `round` the server reported, in order
};

// k random targets c_i of n elements (seeded).
inline std::vector<at::Tensor> random_targets(int k, int64_t n, int64_t seed = 7) {
  at::manual_seed(seed);
  std::vector<at::Tensor> t;
  for (int i = 0; i < k; ++i) t.push_back(at::randn({n}));
  return t;
}

// θ after `steps` of plain SGD (lr) on f(θ) = 0.5 ||θ - c||^2 from θ, by hand.
inline at::Tensor sgd_by_hand(at::Tensor theta, const at::Tensor& c, double lr, int64_t steps) {
  theta = theta.clone();
  for (int64_t s = 0; s < steps; ++s) theta = theta - lr * (theta - c);
  return theta;
}

// Virtual time of harness runs: each inner step of island i takes 1 / options.speeds[i]
// seconds (1 when speeds is empty) and islands run in virtual-time order, as in the
// simulator (communication costs no time here).
class StepClock final : public algorithms::TimeSource {
 public:
  StepClock(transport::Scheduler& scheduler, int id) : scheduler_(scheduler), id_(id) {}
  double now_s() const override { return scheduler_.time(id_); }
  void sleep_until_s(double t) override {
    if (t > now_s()) scheduler_.advance(id_, t);
  }

 private:
  transport::Scheduler& scheduler_;
  int id_;
};

inline config::TrainConfig sgd_train(double lr, int64_t steps) {
  config::TrainConfig t;
  t.optimizer = "sgd";
  t.lr = lr;
  t.schedule = "constant";
  t.warmup_steps = 0;
  t.weight_decay = 0;
  t.momentum = 0;
  t.grad_clip = 0;
  t.steps = steps;
  return t;
}

// What a test may change in a run: the algorithm (default: the registry's make_algorithm) and
// each island's context after the harness filled it (e.g. a layout of its own).
struct HarnessHooks {
  std::function<std::unique_ptr<algorithms::Algorithm>(const algorithms::AlgorithmOptions&, int)> make;
  std::function<void(algorithms::IslandContext&)> setup_context;
  // Islands in the run (0: one per target), and whether an island's objective is the target
  // of the path it trains (ctx.path, DiPaCo) rather than its own.
  int islands = 0;
  bool target_by_path = false;
  // After island `island`'s last step, with its algorithm (may be empty).
  std::function<void(int island, const algorithms::Algorithm& algorithm)> at_end;
};

// targets[i] = c_i; theta0 = initial parameters of every island.
inline QuadraticRun run_quadratic(const algorithms::AlgorithmOptions& options,
                                  const config::TrainConfig& train,
                                  const std::vector<at::Tensor>& targets, const at::Tensor& theta0,
                                  const std::vector<int64_t>& shard_sizes = {},
                                  const compression::Pipeline* pipeline = nullptr,
                                  const std::vector<algorithms::ParamRange>& layout = {},
                                  const HarnessHooks& hooks = {}) {
  const int k = hooks.islands > 0 ? hooks.islands : static_cast<int>(targets.size());
  transport::Scheduler scheduler(k);
  transport::InprocHub hub(k, scheduler);
  const compression::Pipeline raw;
  const compression::Pipeline& codec = pipeline ? *pipeline : raw;
  QuadraticRun out;
  out.params.resize(k);
  out.globals.resize(k);
  out.bytes.resize(k);
  out.rounds.resize(k);
  auto server = algorithms::make_server(options, theta0, [&](const algorithms::ServerRound& r) {
    out.server_global = r.global.clone();
    out.server_rounds.push_back(r.round);
  });
  hub.set_server(server.get());
  std::vector<std::unique_ptr<transport::Group>> groups;
  for (int i = 0; i < k; ++i) groups.push_back(hub.make_group(i));
  scheduler.run([&](int i) {
    at::Tensor params = theta0.clone();
    at::Tensor grads = at::zeros_like(params);
    auto algo = hooks.make ? hooks.make(options, i) : algorithms::make_algorithm(options, i);
    auto opt = train::make_inner_optimizer(train);
    algorithms::IslandContext ctx;
    ctx.island = i;
    ctx.params = params;
    ctx.grads = grads;
    ctx.group = groups[i].get();
    ctx.codec = &codec;
    ctx.shard_size = shard_sizes.empty() ? 1 : shard_sizes[i];
    ctx.on_round = [&out, i](const algorithms::RoundInfo& r) { out.rounds[i].push_back(r); };
    StepClock clock(scheduler, i);
    ctx.time = &clock;
    ctx.speed = i < static_cast<int>(options.speeds.size()) ? options.speeds[i] : 1.0;
    ctx.layout = layout;
    if (hooks.setup_context) hooks.setup_context(ctx);
    core::IslandLoop loop;
    loop.algorithm = algo.get();
    loop.context = &ctx;
    loop.optimizer = opt.get();
    loop.train = &train;
    loop.forward_backward = [&](int64_t) {
      const at::Tensor& c = targets[hooks.target_by_path ? ctx.path : i];
      grads.copy_(params - c);
      return 0.5 * (params - c).pow(2).sum().item<double>();
    };
    loop.after_compute = [&](int64_t) { clock.sleep_until_s(clock.now_s() + 1.0 / ctx.speed); };
    core::run_island(loop);
    out.params[i] = params.clone();
    out.globals[i] = algo->global_params().clone();
    if (hooks.at_end) hooks.at_end(i, *algo);
    out.bytes[i] = groups[i]->bytes();
  });
  return out;
}

// The run with the simulator's SharedTensors (IslandContext::shared): its result, and
// whether every island ended holding the very same global-model tensor (held once).
struct SharedRun {
  QuadraticRun run;
  bool one_global = false;
};
inline SharedRun run_quadratic_shared(const algorithms::AlgorithmOptions& options, const config::TrainConfig& train,
                                      const std::vector<at::Tensor>& targets, const at::Tensor& theta0,
                                      const std::vector<algorithms::ParamRange>& layout = {}) {
  algorithms::SharedTensors shared;
  std::vector<at::Tensor> globals(targets.size());
  HarnessHooks hooks;
  hooks.setup_context = [&](algorithms::IslandContext& ctx) { ctx.shared = &shared; };
  hooks.at_end = [&](int island, const algorithms::Algorithm& a) { globals[island] = a.global_params(); };
  SharedRun out;
  out.run = run_quadratic(options, train, targets, theta0, {}, nullptr, layout, hooks);
  out.one_global = std::all_of(globals.begin(), globals.end(), [&](const at::Tensor& g) { return g.is_same(globals[0]); });
  return out;
}

}  // namespace atl::testing
