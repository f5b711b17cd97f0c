// `atoll island CONFIG --id K`: one island of a real run. Builds exactly what the
// simulator's island K builds (src/sim/island_parts.h), joins the coordinator, waits until
// every configured island is present, then runs the island loop over ZeroMQ or Gloo
// (transport.kind).
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "src/base/log.h"
#include "src/base/status.h"
#include "src/run/processes.h"
#include "src/run/wan_routes.h"
#include "src/sim/components.h"
#include "src/sim/island_loop.h"
#include "src/sim/island_parts.h"
#include "src/sim/json.h"
#include "src/sim/params_file.h"
#include "src/sim/progress.h"
#include "src/sim/wall_time.h"
#include "transport/gloo/gloo_group.h"
#include "transport/zmq/control_client.h"
#include "transport/zmq/curve.h"
#include "transport/zmq/zmq_group.h"

namespace atl::run {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string data_endpoint(const config::TransportConfig& t, int island) {
  return "tcp://" + t.host + ":" + std::to_string(t.base_port + island);
}

// transport.kind gloo: gloo's pairs listen on transport.host (ephemeral ports); the
// data-phase timeout follows the same bandwidth model as zmq's; connecting the pairs of a
// new mesh may take up to two heartbeat timeouts (at least 5 s).
transport::GlooGroupOptions gloo_options(const config::TransportConfig& t) {
  transport::GlooGroupOptions o;
  o.host = t.host;
  o.chunk_bytes = t.chunk_bytes;
  o.bandwidth_mbps = t.bandwidth_mbps;
  o.timeout_slack = t.timeout_slack;
  o.connect_timeout_ms = std::max<int64_t>(2 * t.heartbeat_timeout_ms, 5000);
  o.poll_ms = static_cast<int>(std::clamp<int64_t>(t.heartbeat_ms / 2, 10, 100));
  return o;
}

}  // namespace

void check_real_run(const config::Config& config) {
  if (config.transport.kind != "zmq" && config.transport.kind != "gloo") {
    throw UserError(config.source + ": key 'transport.kind': '" + config.transport.kind +
                    "' is not available for real runs (use zmq or gloo)");
  }
  if (config.transport.kind == "gloo" && config.transport.curve) {
    throw UserError(config.source + ": key 'transport.curve': not available with transport.kind gloo (gloo's TCP "
                    "data plane is neither encrypted nor authenticated; use zmq for untrusted networks)");
  }
  if (config.transport.collective != "ring") {
    throw UserError(config.source + ": key 'transport.collective': '" + config.transport.collective +
                    "' is not available for real runs yet (use ring)");
  }
}

int run_island(const config::Config& config, int island, const ProcessOptions& options) {
  const auto t0 = Clock::now();
  const int k = config.islands.count;
  if (island < 0 || island >= k) {
    throw UserError("--id " + std::to_string(island) + ": must be in [0, " + std::to_string(k) +
                    ") (islands.count is " + std::to_string(k) + ")");
  }
  check_real_run(config);
  sim::configure_threads(config.run.threads);
  torch::manual_seed(config.run.seed);
  sim::RunData data = sim::load_run_data(config);
  const auto algo_options = sim::algorithm_options(config, data.shard_sizes);
  const compression::Pipeline codec = sim::make_pipeline(config);
  sim::IslandParts parts = sim::make_island_parts(config, data, algo_options, island);
  std::unique_ptr<sim::Evaluator> evaluator;
  if (island == 0) evaluator = sim::make_evaluator(config, data);

  const auto& t = config.transport;
  transport::ControlClientOptions cc;
  cc.coordinator = t.coordinator;
  cc.island = island;
  cc.data_endpoint = data_endpoint(t, island);
  cc.heartbeat_ms = t.heartbeat_ms;
  cc.heartbeat_timeout_ms = t.heartbeat_timeout_ms;
  if (t.curve) {
    auto keys = transport::curve::load_keypair(t.keys_dir, "island-" + std::to_string(island));
    if (!keys.is_ok()) throw UserError("transport.keys_dir: " + keys.status().message());
    auto server = transport::curve::load_public_key(t.keys_dir + "/coordinator.pub");
    if (!server.is_ok()) throw UserError("transport.keys_dir: " + server.status().message());
    cc.curve = true;
    cc.curve_keys = keys.value();
    cc.curve_server_key = server.value();
  }
  auto client = transport::ZmqControlClient::connect(cc, Clock::now() + std::chrono::seconds(120));
  if (!client.is_ok()) {
    ATOLL_ERROR("island " << island << ": cannot join " << t.coordinator << ": " << client.status().to_string());
    return 1;
  }
  // With launch --emulate-wan, peers are dialled through the relays of this island's links.
  PeerRoutes control(*client.value(), options.peer_endpoints);

  transport::ZmqGroupOptions go;
  go.bind = cc.data_endpoint;
  go.chunk_bytes = t.chunk_bytes;
  go.max_in_flight = t.max_in_flight;
  go.bandwidth_mbps = t.bandwidth_mbps;
  go.timeout_slack = t.timeout_slack;
  if (t.curve) {
    go.curve = true;
    go.curve_public_key = cc.curve_keys.public_key;
    go.curve_secret_key = cc.curve_keys.secret_key;
  }
  std::unique_ptr<transport::Group> data_plane;
  if (t.kind == "gloo") data_plane = std::make_unique<transport::GlooGroup>(control, gloo_options(t));
  else data_plane = std::make_unique<transport::ZmqGroup>(control, go);
  transport::Group& group = *data_plane;

  // Start together: every configured island must be a member before the first step.
  auto view = control.membership();
  const auto join_deadline = Clock::now() + std::chrono::seconds(300);
  while (static_cast<int>(view.members.size()) < k && Clock::now() < join_deadline) {
    view = control.wait_for_change(view.epoch, Clock::now() + std::chrono::milliseconds(500));
  }
  if (static_cast<int>(view.members.size()) < k) {
    ATOLL_ERROR("island " << island << ": only " << view.members.size() << " of " << k
                          << " islands joined within 300 s");
    return 1;
  }

  algorithms::IslandContext ctx;
  ctx.island = island;
  ctx.params = parts.model->params();
  ctx.grads = parts.model->grads();
  // Round records' sync_s is the wall time blocked in the exchange. An island the coordinator
  // declared dead while it was cut off comes back (its client joins again) into a run that
  // went on without it: it fails instead of waiting for collectives the others finished.
  const transport::ZmqControlClient& joined = *client.value();
  WatchedGroup timed(group, [&joined, island]() -> Status {
    if (!joined.status().is_ok()) return joined.status();
    if (joined.joins() > 1) {
      return Status(StatusCode::kPeerLost, "island " + std::to_string(island) +
                                               " was declared dead while cut off from the run, which went on without it");
    }
    return Status::ok();
  });
  ctx.group = &timed;
  ctx.codec = &codec;
  ctx.shard_size = data.shard_sizes[island];
  for (const auto& s : parts.model->layout()) ctx.layout.push_back({s.offset, s.numel, s.block});
  sim::WallTime wall_time;
  ctx.time = &wall_time;
  ctx.on_round = [&](const algorithms::RoundInfo& r) {
    std::string record = sim::round_record(island, r, seconds_since(t0));
    record.pop_back();  // the closing brace: sync_s joins the record
    control.record(record + ",\"sync_s\":" + sim::json_number(timed.take_blocked_s()) + "}");
  };

  sim::Progress progress(options.quiet || island != 0 ? sim::Progress::Mode::kQuiet
                                                      : sim::Progress::Mode::kAuto);
  sim::ProgressState state;
  auto evaluate = [&](int64_t step, const at::Tensor& params) {
    sim::EvalResult r = evaluator->evaluate(params);
    state.val_loss = r.loss;
    control.record(sim::eval_record(step, r, data.classifier, group.bytes().sent, seconds_since(t0)));
  };

  const auto& train = config.train;
  sim::IslandLoop loop;
  loop.algorithm = parts.algorithm.get();
  loop.context = &ctx;
  loop.optimizer = parts.optimizer.get();
  loop.train = &train;
  parts.model->set_training(true);
  loop.forward_backward = [&](int64_t) { return sim::forward_backward(parts, train); };
  double loss_acc = 0;
  int64_t loss_n = 0, steps = 0;
  if (evaluator && !parts.algorithm->global_on_server()) evaluate(0, parts.model->params());
  loop.on_step = [&](int64_t step, int64_t total, double loss, double lr) {
    steps = step;
    loss_acc += loss;
    ++loss_n;
    if (step % train.log_every == 0 || step == total) {
      control.record(sim::train_record(island, step, loss_acc / static_cast<double>(loss_n), lr,
                                       seconds_since(t0)));
      loss_acc = 0;
      loss_n = 0;
    }
    if (evaluator && !parts.algorithm->global_on_server() &&
        ((train.eval_every > 0 && step % train.eval_every == 0) || step == total)) {
      evaluate(step, parts.algorithm->global_params());
      parts.model->set_training(true);
    }
    state.steps_done = step;
    state.steps_total = total;
    state.last_loss = loss;
    state.bytes = group.bytes().sent;
    progress.update(state);
  };
  sim::run_island(loop);
  progress.finish(state);

  const auto bytes = group.bytes();
  control.record(sim::JsonObject()
                     .add("event", "island_end")
                     .add("island", island)
                     .add("steps", steps)
                     .add("bytes_sent", bytes.sent)
                     .add("bytes_recv", bytes.received)
                     .add("raw_sent", bytes.raw_sent)
                     .add("wall_time_s", seconds_since(t0))
                     .str());
  if (island == 0 && !parts.algorithm->global_on_server()) {
    const std::string dir = config.run.out_dir + "/" + config.run.name;
    sim::write_params(dir + "/final_params.bin", parts.algorithm->global_params());
  }
  return 0;
}

}  // namespace atl::run
