#include "src/sim/simulator.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "algorithms/algorithm.h"
#include "algorithms/fedavg.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/data/dataset.h"
#include "src/models/model.h"
#include "src/sim/components.h"
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

// Everything one simulated island owns.
struct Island {
  IslandParts parts;
  std::unique_ptr<transport::Group> group;
  algorithms::IslandContext context;
  int64_t steps = 0;
  int64_t rounds = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  auto total_bytes = [&] {
    uint64_t b = 0;
    for (auto& is : islands) if (is.group) b += is.group->bytes().sent;
    return b;
  };
  auto evaluate = [&](int64_t step, const at::Tensor& params) {
    if (step == last_eval_step) return;
    last_eval_step = step;
    EvalResult r = evaluator->evaluate(params);
    final_val = r.loss;
    best_val = std::min(best_val, r.loss);
    final_acc = r.accuracy;
    state.val_loss = r.loss;
    dir.record(eval_record(step, r, classifier, total_bytes(), seconds_since(t0)));
  };

  transport::Scheduler scheduler(k);
  transport::InprocHub hub(k, scheduler);

  // Server role (fedavg): evaluates the global model as rounds complete.
  const int64_t nominal_round_steps =
      algo_options.name == "fedavg"
          ? algorithms::fedavg::local_steps(algo_options, splits.train->size() / std::max(1, k))
          : 0;
  at::Tensor server_global;  // fedavg: the server's latest global model
  auto server = algorithms::make_server(
      algo_options, islands[0].parts.model->params(), [&](int64_t round, const at::Tensor& global) {
        const int64_t step = round * nominal_round_steps;
        const int64_t prev = (round - 1) * nominal_round_steps;
        const int64_t every = config.train.eval_every;
        if (round == algo_options.rounds || (every > 0 && step / every != prev / every)) {
          evaluate(step, global);
        }
        state.rounds = std::max(state.rounds, round);
        server_global = global;
      });
  hub.set_server(server.get());

  evaluate(0, islands[0].parts.model->params());

  for (int i = 0; i < k; ++i) {
    Island& is = islands[i];
    is.group = hub.make_group(i);
    is.context.island = i;
    is.context.params = is.parts.model->params();
    is.context.grads = is.parts.model->grads();
    is.context.group = is.group.get();
    is.context.codec = &codec;
    is.context.shard_size = run_data.shard_sizes[i];
    is.context.on_round = [&, i](const algorithms::RoundInfo& r) {
      Island& me = islands[i];
      me.rounds = r.round;
      state.rounds = std::max(state.rounds, r.round);
      dir.record(round_record(i, r, seconds_since(t0)));
    };
  }

  const auto& train = config.train;
  const int64_t log_every = train.log_every;
  scheduler.run([&](int i) {
    at::init_num_threads();
    Island& is = islands[i];
    IslandLoop loop;
    loop.algorithm = is.parts.algorithm.get();
    loop.context = &is.context;
    loop.optimizer = is.parts.optimizer.get();
    loop.train = &train;
    is.parts.model->set_training(true);
    loop.forward_backward = [&](int64_t) { return forward_backward(is.parts, train); };
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
      // Island 0 evaluates the global model for algorithms that keep it on the islands.
      if (i == 0 && !is.parts.algorithm->global_on_server() &&
          ((train.eval_every > 0 && step % train.eval_every == 0) || step == total)) {
        evaluate(step, is.parts.algorithm->global_params());
        is.parts.model->set_training(true);
      }
      state.bytes = total_bytes();
      progress.update(state);
    };
    run_island(loop);
  });

  RunSummary summary;
  summary.run_dir = dir.path();
  summary.final_val_loss = final_val;
  summary.best_val_loss = best_val;
  summary.final_val_accuracy = final_acc;
  for (auto& is : islands) {
    summary.bytes_sent_total += is.group->bytes().sent;
    summary.bytes_recv_total += is.group->bytes().received;
    summary.steps = std::max(summary.steps, is.steps);
    summary.rounds = std::max(summary.rounds, is.rounds);
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
      .add("wall_time_s", summary.wall_time_s)
      .add("wall_threads", threads);
  dir.write_summary(s.str());
  // The final global model (fedavg: the server's; otherwise island 0's global copy).
  write_params(dir.path() + "/final_params.bin",
               server_global.defined() ? server_global : islands[0].parts.algorithm->global_params());
  dir.record(JsonObject().add("event", "end").add("final_val_loss", summary.final_val_loss).str());
  return summary;
}

}  // namespace atl::sim
