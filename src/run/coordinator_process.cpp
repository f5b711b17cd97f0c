// `atoll coordinator CONFIG`: membership, rendezvous, the server role and the run
// directory of a real run. Ends when every configured island has joined and all of them
// have left again (finished, or were declared dead), or on SIGINT/SIGTERM.
#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <mutex>
#include <set>
#include <string>

#include "algorithms/algorithm.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/run/processes.h"
#include "src/run/run_totals.h"
#include "src/core/components.h"
#include "src/core/island_parts.h"
#include "src/core/json.h"
#include "src/core/params_file.h"
#include "src/core/records.h"
#include "src/core/run_dir.h"
#include "src/core/validate.h"
#include "transport/zmq/coordinator.h"
#include "transport/zmq/curve.h"

namespace atl::run {

using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

}  // namespace

int run_coordinator(const config::Config& config, const ProcessOptions& options) {
  const auto t0 = Clock::now();
  const int k = config.islands.count;
  core::validate_config(config, core::Target::kCoordinator);
  core::configure_threads(config.run.threads);
  core::RunData data = core::load_run_data(config);
  const auto algo_options = core::algorithm_options(config, data.shard_sizes);
  const compression::Pipeline codec = core::make_pipeline(config);
  core::RunDir dir(config, options.force);
  RunTotals totals;
  auto sink = [&](const std::string& json) {
    if (totals.add(json)) dir.record(json);
  };

  // The server role (fedavg, async_local_sgd): it holds the global model, so it is
  // evaluated here.
  std::unique_ptr<core::Evaluator> evaluator;
  std::unique_ptr<core::ServerEvalSchedule> evals;
  at::Tensor server_global;
  std::unique_ptr<transport::OuterServer> server;
  int64_t server_round = 0;
  auto server_eval = [&](int64_t step, const at::Tensor& global) {
    core::EvalResult r = evaluator->evaluate(global);
    sink(core::eval_record(-1, step, r, data.classifier, 0,
                          core::RecordTime{std::chrono::duration<double>(Clock::now() - t0).count(), NAN}));
  };
  if (algorithms::make_server(algo_options, at::zeros({1}), nullptr) != nullptr) {
    auto init = core::make_island_parts(config, data, algo_options, 0);
    evaluator = core::make_evaluator(config, data);
    evals = std::make_unique<core::ServerEvalSchedule>(algo_options, config.train, data.splits.train->size());
    server = algorithms::make_server(algo_options, init.model->params(), [&](int64_t round, const at::Tensor& global) {
      server_global = global;
      server_round = round;
      if (const int64_t step = evals->after_round(round); step >= 0) server_eval(step, global);
    });
    server_eval(0, init.model->params());  // step 0, the initial model, as simulate does
  }

  const auto& t = config.transport;
  transport::CoordinatorOptions co;
  co.endpoint = t.coordinator;
  co.expected_islands = k;
  co.heartbeat_ms = t.heartbeat_ms;
  co.heartbeat_timeout_ms = t.heartbeat_timeout_ms;
  co.server = server.get();
  co.pipeline = codec;
  co.record_sink = sink;
  // One `membership` record per island whose membership changed (docs/metrics.md). An island
  // that joins again after it left or failed is `rejoined`; one beyond islands.count joining for
  // the first time is `added` (as the simulator names its events).
  std::set<int> seen;
  co.on_membership = [&](const transport::Membership& view, const std::vector<transport::MemberChange>& changes) {
    core::MembershipChange m;
    m.epoch = view.epoch;
    for (const transport::Peer& p : view.members) m.members.push_back(p.id);
    for (const transport::MemberChange& c : changes) {
      m.island = c.island;
      m.change = c.change;
      m.reason = c.why;
      if (c.change == "joined") {
        if (seen.count(c.island)) m.change = "rejoined";
        else if (c.island >= k) m.change = "added";
        seen.insert(c.island);
      }
      sink(core::membership_record(m, core::RecordTime{std::chrono::duration<double>(Clock::now() - t0).count(), NAN}));
    }
  };
  if (t.curve) {
    auto keys = transport::curve::load_keypair(t.keys_dir, "coordinator");
    if (!keys.is_ok()) throw UserError("transport.keys_dir: " + keys.status().message());
    co.curve = true;
    co.curve_secret_key = keys.value().secret_key;
    co.keys_dir = t.keys_dir;
  } else {
    ATOLL_WARN("transport.curve is off: control and data traffic is unauthenticated and unencrypted");
  }
  auto coordinator = transport::Coordinator::start(co);
  if (!coordinator.is_ok()) {
    throw UserError("transport.coordinator: cannot start the coordinator at " + t.coordinator + ": " +
                    coordinator.status().message());
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (!options.quiet) {
    ATOLL_INFO("coordinator " << coordinator.value()->endpoint() << ": waiting for " << k
                              << " islands; run directory " << dir.path());
  }

  bool all_joined = false;
  auto view = coordinator.value()->membership();
  while (!g_stop) {
    view = coordinator.value()->wait_for_change(view.epoch, Clock::now() + std::chrono::milliseconds(200));
    if (static_cast<int>(view.members.size()) >= k) all_joined = true;
    if (all_joined && view.members.empty()) break;
  }
  coordinator.value()->stop();
  // As in simulate: the server's final model is evaluated even when churn kept the last round
  // from being the planned one (a step already evaluated is not evaluated again).
  int64_t final_step = -1;  // the step whose eval is the run's final one
  if (server_global.defined()) {
    final_step = evals->label(server_round);
    if (!totals.evaluated(final_step)) server_eval(final_step, server_global);
  }

  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  core::JsonObject s;
  s.add("algorithm", config.algorithm.name)
      .add("islands", k)
      .add("model", config.model.name)
      .add("mode", "processes")
      .add("compression", codec.describe());
  totals.add_summary(s, final_step, data.classifier);
  s.add("wall_time_s", wall);
  dir.write_summary(s.str());
  if (server_global.defined()) core::write_params(dir.path() + "/final_params.bin", server_global);
  if (g_stop) {
    ATOLL_WARN("coordinator stopped by a signal before the run finished");
    return 1;
  }
  // A run that lost islands but finished with the survivors succeeded (summary says how many).
  return totals.finished() > 0 ? 0 : 1;
}

int keygen(const std::string& dir, const std::string& name) {
  auto keys = transport::curve::generate_keypair(dir, name);
  if (!keys.is_ok()) throw UserError("keygen: " + keys.status().message());
  std::printf("%s/%s.pub: %s\n", dir.c_str(), name.c_str(), keys.value().public_key.c_str());
  return 0;
}

}  // namespace atl::run
