// Simulator overhead: wall time of `atoll simulate` against the same inner steps run back to
// back on one island's parts without the simulator (no scheduler, no threads per island, no
// virtual clock, no collectives). Both run the config's model, data and inner optimizer with
// the same thread count; evaluation is reduced to one batch at the end so that both sides do
// the same work apart from what the simulator adds (scheduling, clock, outer syncs, records).
// The two are run alternately `--repeats` times and the best of each is reported, since the
// machine may be busy. Prints one JSON line.
//
//   build/tests/bench/sim_overhead_bench configs/quickstart.yaml --steps 50 --repeats 2
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "src/config/config.h"
#include "src/core/components.h"
#include "src/core/island_parts.h"
#include "src/core/simulator.h"
#include "src/train/inner_optimizer.h"

namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("atoll simulator overhead benchmark");
  std::string path = "configs/quickstart.yaml";
  int64_t steps = 50;
  int islands = 0;
  int repeats = 2;
  std::vector<std::string> sets;
  app.add_option("config", path, "config file");
  app.add_option("--steps", steps, "inner steps per island");
  app.add_option("--islands", islands, "islands (0 = the config's)");
  app.add_option("--repeats", repeats, "alternating repetitions; best of each is reported");
  app.add_option("--set", sets, "config overrides section.key=value");
  CLI11_PARSE(app, argc, argv);

  sets.push_back("train.steps=" + std::to_string(steps));
  sets.push_back("train.eval_every=0");
  sets.push_back("train.eval_batches=1");
  sets.push_back("run.out_dir=" + (std::filesystem::temp_directory_path() / "atoll_sim_overhead").string());
  if (islands > 0) sets.push_back("islands.count=" + std::to_string(islands));
  const atl::config::Config config = atl::config::load_config(path, sets);
  const int threads = atl::core::configure_threads(config.run.threads);
  const int k = config.islands.count;

  // Back to back: k * steps inner steps on island 0's parts.
  atl::core::RunData data = atl::core::load_run_data(config);
  const auto options = atl::core::algorithm_options(config, data.shard_sizes);
  auto plain = [&] {
    atl::core::IslandParts parts = atl::core::make_island_parts(config, data, options, 0);
    parts.model->set_training(true);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 1; s <= k * steps; ++s) {
      {
        torch::NoGradGuard no_grad;
        parts.model->grads().zero_();
      }
      atl::core::forward_backward(parts, config.train);
      atl::train::clip_grad_norm(parts.model->grads(), config.train.grad_clip);
      parts.optimizer->step(parts.model->params(), parts.model->grads(),
                            atl::train::learning_rate(config.train, (s - 1) % steps + 1, steps));
    }
    return seconds(t0);
  };
  auto simulated = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    atl::core::simulate(config, {true, true});
    return seconds(t0);
  };
  double best_plain = std::numeric_limits<double>::infinity(), best_sim = best_plain;
  for (int r = 0; r < repeats; ++r) {
    best_plain = std::min(best_plain, plain());
    best_sim = std::min(best_sim, simulated());
  }
  std::printf(
      "{\"bench\":\"sim_overhead\",\"config\":\"%s\",\"algorithm\":\"%s\",\"islands\":%d,"
      "\"steps_per_island\":%lld,\"threads\":%d,\"plain_s\":%.3f,\"simulate_s\":%.3f,\"ratio\":%.4f}\n",
      path.c_str(), config.algorithm.name.c_str(), k, static_cast<long long>(steps), threads,
      best_plain, best_sim, best_sim / best_plain);
  return 0;
}
