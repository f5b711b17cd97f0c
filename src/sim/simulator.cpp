#include "src/sim/simulator.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <utility>

#include "algorithms/algorithm.h"
#include "algorithms/async_local_sgd.h"
#include "algorithms/fedavg.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/data/dataset.h"
#include "src/models/model.h"
#include "src/sim/components.h"
#include "src/sim/cost_model.h"
#include "src/sim/network_profile.h"
#include "src/sim/evaluator.h"
#include "src/sim/island_parts.h"
#include "src/sim/island_loop.h"
#include "src/sim/json.h"
#include "src/sim/params_file.h"
#include "src/sim/progress.h"
#include "src/sim/run_dir.h"
#include "src/train/inner_optimizer.h"
#include "transport/inproc/inproc_group.h"
#include "transport/inproc/scheduler.h"

namespace atl::sim {

namespace {

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
  algorithms::IslandContext context;
  int64_t steps = 0;
  int64_t rounds = 0;
  double compute_s = 0;  // virtual seconds spent computing inner steps
  bool alive = true;
  // At the previous round record: to report per-round compute / comm / idle.
  double last_compute_s = 0, last_comm_s = 0, last_idle_s = 0;
};

// Thrown inside a killed island's thread to unwind its loop.
struct IslandKilled {};

// Appends the fields of `more` to the JSON object `record`.
std::string extend(std::string record, const JsonObject& more) {
  const std::string m = more.str();
  if (m.size() <= 2) return record;
  record.pop_back();
  return record + "," + m.substr(1);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

namespace {

// Events the simulator cannot run yet are refused before anything starts.
void check_events(const config::Config& config) {
  for (size_t i = 0; i < config.islands.events.size(); ++i) {
    const auto& e = config.islands.events[i];
    const std::string where = config.source + ": key 'islands.events[" + std::to_string(i) + "]': ";
    if (e.rejoin >= 0 || e.add > 0)
      throw UserError(where + "rejoin and add events are not supported by the simulator yet");
    if (e.kill >= 0 && (config.algorithm.name == "fedavg"))
      throw UserError(where + "kill events need an algorithm without a round barrier on the "
                              "server (fedavg waits for every selected client)");
  }
}

}  // namespace

RunSummary simulate(const config::Config& config, const SimulateOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const int threads = configure_threads(config.run.threads);
  const int k = config.islands.count;
  const uint64_t seed = config.run.seed;
  const c10::Device device(config.run.device);
  torch::manual_seed(seed);

  // --- data, models, algorithm (everything that can fail on user input, before the run dir)
  RunData run_data = load_run_data(config);
  const data::Splits& splits = run_data.splits;
  const bool classifier = run_data.classifier;
  const auto algo_options = algorithm_options(config, run_data.shard_sizes);
  const compression::Pipeline codec = make_pipeline(config);
  std::vector<Island> islands(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) islands[i].parts = make_island_parts(config, run_data, algo_options, i);
  auto evaluator = make_evaluator(config, run_data);
  const int64_t n_params = islands[0].parts.model->numel();
  check_events(config);

  // --- virtual clock: compute and network models
  const transport::NetworkModel network = make_network_model(config);
  const double examples_per_step = static_cast<double>(config.train.batch_size) * config.train.grad_accum *
                                   (classifier ? 1.0 : static_cast<double>(config.model.seq_len));
  CostModel cost(config.compute, islands[0].parts.model->flops_per_example() * examples_per_step, k, seed);

  RunDir dir(config, options.force);
  Progress progress(options.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);
  progress.message("atoll simulate: " + config.run.name + ": " + config.algorithm.name + ", " +
                   std::to_string(k) + " islands, " + config.model.name + " " +
                   std::to_string(n_params) + " params, " + splits.train->describe() + ", " +
                   std::to_string(threads) + " threads -> " + dir.path());

  dir.record(JsonObject()
                 .add("event", "start")
                 .add("algorithm", config.algorithm.name)
                 .add("islands", k)
                 .add("params", n_params)
                 .add("compression", codec.describe())
                 .add("train_examples", splits.train->size())
                 .add("val_examples", splits.val->size())
                 .add("wall_threads", threads)
                 .str());

  // --- shared run state (touched only by the island holding the scheduler's turn)
  ProgressState state;
  state.steps_total = static_cast<int64_t>(k) * config.train.steps;
  double final_val = NAN, best_val = INFINITY, final_acc = -1;
  int64_t last_eval_step = -1;
  double target_time = NAN, target_bytes = NAN;
  int64_t target_step = -1;
  auto total_bytes = [&] {
    uint64_t b = 0;
    for (auto& is : islands) if (is.group) b += is.group->bytes().sent;
    return b;
  };
  auto evaluate = [&](int64_t step, const at::Tensor& params, double sim_time) {
    if (step == last_eval_step) return;
    last_eval_step = step;
    EvalResult r = evaluator->evaluate(params);
    final_val = r.loss;
    best_val = std::min(best_val, r.loss);
    final_acc = r.accuracy;
    state.val_loss = r.loss;
    const uint64_t bytes = total_bytes();
    if (config.train.target_loss > 0 && target_step < 0 && r.loss <= config.train.target_loss) {
      target_step = step;
      target_time = sim_time;
      target_bytes = static_cast<double>(bytes);
    }
    dir.record(extend(eval_record(step, r, classifier, bytes, seconds_since(t0)),
                      JsonObject().add("sim_time_s", sim_time)));
  };

  transport::Scheduler scheduler(k);
  transport::InprocHub hub(k, scheduler);
  // Survivors notice a dead island after the heartbeat timeout, as in real runs.
  hub.set_network(&network, seed, static_cast<double>(config.transport.heartbeat_timeout_ms) / 1e3);

  // Server role (fedavg, async_local_sgd): evaluates the global model as rounds complete.
  // async_local_sgd reports every arrival with `round` = local steps applied so far (summed
  // over islands); it is evaluated every eval_every of those and after the last one.
  const bool async = algo_options.name == "async_local_sgd";
  const int64_t async_total = async ? algorithms::async_local_sgd::total_steps(algo_options) : 0;
  int64_t async_prev = 0;
  const int64_t nominal_round_steps =
      algo_options.name == "fedavg"
          ? algorithms::fedavg::local_steps(algo_options, splits.train->size() / std::max(1, k))
          : 0;
  at::Tensor server_global;  // fedavg: the server's latest global model
  double server_time = 0;    // virtual time of the latest server round (the pusher's clock)
  auto server = algorithms::make_server(
      algo_options, islands[0].parts.model->params(), [&](int64_t round, const at::Tensor& global) {
        server_time = scheduler.time(scheduler.current());  // the pusher runs the server
        const int64_t step = async ? round : round * nominal_round_steps;
        const int64_t prev = async ? std::exchange(async_prev, round) : (round - 1) * nominal_round_steps;
        const int64_t every = config.train.eval_every;
        const bool last = async ? round == async_total : round == algo_options.rounds;
        if (last || (every > 0 && step / every != prev / every)) {
          evaluate(step, global, server_time);
        }
        if (!async) state.rounds = std::max(state.rounds, round);
        server_global = global;
      });
  hub.set_server(server.get());

  evaluate(0, islands[0].parts.model->params(), 0.0);

  for (int i = 0; i < k; ++i) {
    Island& is = islands[i];
    is.group = hub.make_group(i);
    is.context.island = i;
    is.context.params = is.parts.model->params();
    is.context.grads = is.parts.model->grads();
    is.context.group = is.group.get();
    is.context.codec = &codec;
    is.context.shard_size = run_data.shard_sizes[i];
    is.time = std::make_unique<VirtualTime>(scheduler, i);
    is.context.time = is.time.get();
    is.context.speed = cost.speeds()[static_cast<size_t>(i)];
    is.context.on_round = [&, i](const algorithms::RoundInfo& r) {
      Island& me = islands[i];
      me.rounds = r.round;
      state.rounds = std::max(state.rounds, r.round);
      const auto waits = hub.wait_time(i);
      const double idle = waits.idle_s + me.time->slept_s;
      dir.record(extend(round_record(i, r, seconds_since(t0)),
                        JsonObject()
                            .add("sim_time_s", scheduler.time(i))
                            .add("compute_s", me.compute_s - me.last_compute_s)
                            .add("comm_s", waits.comm_s - me.last_comm_s)
                            .add("idle_s", idle - me.last_idle_s)));
      me.last_compute_s = me.compute_s;
      me.last_comm_s = waits.comm_s;
      me.last_idle_s = idle;
    };
  }

  const auto& train = config.train;
  const int64_t log_every = train.log_every;
  // Kill triggers of each island (islands.events).
  std::vector<std::vector<config::IslandEvent>> kills(static_cast<size_t>(k));
  for (const auto& e : config.islands.events)
    if (e.kill >= 0) kills[static_cast<size_t>(e.kill)].push_back(e);
  auto die = [&](int i, const char* why) {
    Island& is = islands[i];
    is.alive = false;
    hub.remove_member(i, scheduler.time(i));
    dir.record(JsonObject()
                   .add("event", "membership")
                   .add("island", i)
                   .add("change", "killed")
                   .add("reason", why)
                   .add("step", is.steps)
                   .add("members", static_cast<int64_t>(is.group->view().members.size()))
                   .add("sim_time_s", scheduler.time(i))
                   .str());
    throw IslandKilled{};
  };
  // The live island with the lowest id evaluates the global model.
  auto evaluator_island = [&] {
    for (int j = 0; j < k; ++j)
      if (islands[j].alive) return j;
    return -1;
  };

  scheduler.run([&](int i) {
    at::init_num_threads();
    Island& is = islands[i];

    IslandLoop loop;
    loop.algorithm = is.parts.algorithm.get();
    loop.context = &is.context;
    loop.optimizer = is.parts.optimizer.get();
    loop.train = &train;
    is.parts.model->set_training(true);
    loop.forward_backward = [&](int64_t) {
  
      return forward_backward(is.parts, train);
    };
    loop.after_compute = [&](int64_t step) {
      const double dt = cost.next_step_s(i);
      is.compute_s += dt;
      scheduler.advance(i, scheduler.time(i) + dt);
  
      for (const auto& e : kills[static_cast<size_t>(i)])
        if (e.at_time_s >= 0 && scheduler.time(i) >= e.at_time_s) die(i, "at_time_s");
      (void)step;
    };
    double loss_acc = 0;
    int64_t loss_n = 0;
    bool planned = false;
    loop.on_step = [&](int64_t step, int64_t total, double loss, double lr) {
      if (!planned) {
        state.steps_total += total - train.steps;
        planned = true;
      }
      is.steps = step;
      ++state.steps_done;
      state.last_loss = loss;
      loss_acc += loss;
      ++loss_n;
      if (step % log_every == 0 || step == total) {
        dir.record(train_record(i, step, loss_acc / static_cast<double>(loss_n), lr, seconds_since(t0)));
        loss_acc = 0;
        loss_n = 0;
      }
  
      // The lowest live island evaluates the global model for algorithms that keep it on
      // the islands.
      if (i == evaluator_island() && !is.parts.algorithm->global_on_server() &&
          ((train.eval_every > 0 && step % train.eval_every == 0) || step == total)) {
        evaluate(step, is.parts.algorithm->global_params(), scheduler.time(i));
        is.parts.model->set_training(true);
      }
      state.bytes = total_bytes();
      progress.update(state);
      for (const auto& e : kills[static_cast<size_t>(i)])
        if (e.at_step == step) die(i, "at_step");
    };
    try {
      run_island(loop);
    } catch (const IslandKilled&) {
      // Unwound; its collectives completed without it. Drop the algorithm now: it may hold
      // handles into the hub.
      is.parts.algorithm.reset();
    }
  });

  RunSummary summary;
  summary.run_dir = dir.path();
  summary.final_val_loss = final_val;
  summary.best_val_loss = best_val;
  summary.final_val_accuracy = final_acc;
  double sim_time = 0, busy = 0;
  for (int i = 0; i < k; ++i) {
    Island& is = islands[i];
    summary.bytes_sent_total += is.group->bytes().sent;
    summary.bytes_recv_total += is.group->bytes().received;
    summary.steps = std::max(summary.steps, is.steps);
    summary.rounds = std::max(summary.rounds, is.rounds);
    sim_time = std::max(sim_time, scheduler.time(i));
    busy += is.compute_s;
  }
  summary.rounds = std::max(summary.rounds, state.rounds);
  summary.wall_time_s = seconds_since(t0);
  progress.finish(state);

  JsonObject s;
  s.add("algorithm", config.algorithm.name)
      .add("islands", k)
      .add("model", config.model.name)
      .add("params", n_params)
      .add("compression", codec.describe())
      .add("steps", summary.steps)
      .add("rounds", summary.rounds)
      .add("final_val_loss", summary.final_val_loss)
      .add("best_val_loss", summary.best_val_loss);
  if (classifier) s.add("final_val_accuracy", summary.final_val_accuracy);
  uint64_t raw_sent = 0;
  for (auto& is : islands) raw_sent += is.group->bytes().raw_sent;
  s.add("bytes_sent_total", summary.bytes_sent_total)
      .add("bytes_recv_total", summary.bytes_recv_total)
      .add("compression_ratio", summary.bytes_sent_total > 0 ? static_cast<double>(raw_sent) / static_cast<double>(summary.bytes_sent_total) : 1.0)
      .add("sim_time_s", sim_time)
      .add("compute_utilization", sim_time > 0 ? busy / (k * sim_time) : 1.0)
      .add("step_time_s", cost.base_step_s());
  if (config.train.target_loss > 0) {
    s.add("target_loss", config.train.target_loss)
        .add("time_to_target_s", target_time)
        .add("steps_to_target", target_step)
        .add("bytes_to_target", target_bytes);
  }
  s.add("wall_time_s", summary.wall_time_s).add("wall_threads", threads);
  dir.write_summary(s.str());
  // The final global model (fedavg: the server's; otherwise island 0's global copy).
  const int last = evaluator_island();
  if (server_global.defined() || last >= 0) {
    write_params(dir.path() + "/final_params.bin",
                 server_global.defined() ? server_global : islands[last].parts.algorithm->global_params());
  }
  dir.record(JsonObject().add("event", "end").add("final_val_loss", summary.final_val_loss).str());
  return summary;
}

}  // namespace atl::sim
