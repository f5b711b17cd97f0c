// `atoll coordinator CONFIG`: membership, rendezvous, the server role and the run
// directory of a real run. Decides when the run starts and with which islands
// (src/run/start_gate.h). Ends when the run has started and every island has left again
// (finished, or declared dead), soon after a start that failed, or on SIGINT/SIGTERM.
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "algorithms/algorithm.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/run/processes.h"
#include "src/run/run_totals.h"
#include "src/run/start_gate.h"
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
  check_min_islands(config, algorithms::make_server(algo_options, at::zeros({1}), nullptr) != nullptr);
  core::RunDir dir(config, options.force);
  // data.normalize: the statistics every island computed the same way, beside config.yaml.
  data::write_normalization(data.splits.normalization, data.splits.train->input_dim(), dir.path());
  RunTotals totals;
  auto sink = [&](const std::string& json) {
    std::string routed;  // DiPaCo: the routed eval once every path's record of a step is in
    if (totals.add(json, &routed)) dir.record(json);
    if (!routed.empty() && totals.add(routed)) dir.record(routed);
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
    server = algorithms::make_server(algo_options, init.model->params(), [&](const algorithms::ServerRound& r) {
      server_global = r.global;
      server_round = r.round;
      const int64_t step = evals->after_round(r.round);
      if (r.selected >= 0)  // fedavg: which clients made it into the round (docs/metrics.md)
        sink(core::server_round_record(
            r, evals->label(r.round), core::RecordTime{std::chrono::duration<double>(Clock::now() - t0).count(), NAN}));
      if (step >= 0) server_eval(step, r.global);
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

  // The start (src/run/start_gate.h): decided here, announced through the store.
  transport::Coordinator& coord = *coordinator.value();
  JoinView joins;
  joins.islands = k;
  joins.min_islands = t.min_islands > 0 ? t.min_islands : k;
  joins.join_timeout_s = t.join_timeout_s;
  const auto join_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(t.join_timeout_s));
  std::set<int> ever_joined;
  size_t refused_seen = 0;
  std::optional<StartDecision> decision;
  std::optional<Clock::time_point> failed_at;
  auto view = coord.membership();
  while (!g_stop) {
    view = coord.wait_for_change(view.epoch, Clock::now() + std::chrono::milliseconds(200));
    for (const auto& p : view.members) ever_joined.insert(p.id);
    if (!decision) {
      joins.joined.clear();
      for (const auto& p : view.members) joins.joined.push_back(p.id);
      joins.left.clear();
      for (int id : ever_joined) {
        if (std::find(joins.joined.begin(), joins.joined.end(), id) == joins.joined.end()) joins.left.insert(id);
      }
      if (t.curve) {
        const auto keys = coord.refused_keys();
        if (keys.size() != refused_seen) {
          refused_seen = keys.size();
          joins.refused = refused_islands(t.keys_dir, k, keys);
        }
      }
      joins.timed_out = Clock::now() >= join_deadline;
      decision = decide_start(joins);
      if (decision) {
        coord.store_set(kRunStartKey, encode_start(*decision));
        if (!decision->start) {
          ATOLL_ERROR("coordinator: the run cannot start: " << decision->why);
          failed_at = Clock::now();
        } else if (!decision->why.empty()) {
          ATOLL_WARN("coordinator: " << decision->why);
        }
      }
    }
    if (decision && decision->start && view.members.empty()) break;
    // A failed start: the islands hear of it when they join (an early failure may come while
    // some are still starting) and leave; stop once every island not refused has joined and
    // left, or 10 s after the decision (30 s at most for islands that do not leave).
    if (failed_at) {
      bool all_heard = true;
      for (int id = 0; id < k; ++id) all_heard = all_heard && (joins.refused.count(id) || ever_joined.count(id));
      const auto since = Clock::now() - *failed_at;
      if ((view.members.empty() && (all_heard || since > std::chrono::seconds(10))) || since > std::chrono::seconds(30))
        break;
    }
  }
  coord.stop();
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
