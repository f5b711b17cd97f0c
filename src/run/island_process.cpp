// `atoll island CONFIG --id K`: one island of a real run. Builds exactly what the
// simulator's island K builds (src/sim/island_parts.h), joins the coordinator, waits until
// every configured island is present, then runs the island loop over ZeroMQ or Gloo
// (transport.kind). Started again while the run is going (after a crash), it rejoins: it
// waits for a live island's state hand-over (src/run/handover.h) and goes on from there.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "src/base/log.h"
#include "src/base/status.h"
#include "src/run/handover.h"
#include "src/run/processes.h"
#include "src/run/wan_routes.h"
#include "src/sim/components.h"
#include "src/sim/island_loop.h"
#include "src/sim/island_parts.h"
#include "src/sim/json.h"
#include "src/sim/params_file.h"
#include "src/sim/progress.h"
#include "src/sim/validate.h"
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

// Set in the store by every island before its first step: an island that finds it when it
// joins comes into a run that is already going.
const char kStartedKey[] = "atoll/run/started";

// Rejoining hands over the global model and Algorithm::export_state(); these setups keep more.
Status check_rejoin(const config::Config& config, const algorithms::Algorithm& algorithm) {
  std::string why;
  if (config.transport.kind != "zmq") why = "transport.kind " + config.transport.kind + " (use zmq)";
  else if (algorithm.global_on_server()) why = config.algorithm.name + " (its global model lives in the coordinator's server role)";
  if (why.empty()) return Status::ok();
  return Status(StatusCode::kUnavailable, "rejoining a running run is not supported with " + why);
}

}  // namespace

namespace {

// run_island_once's result when the island was declared dead while cut off and came back
// into a run that went on without it: it is to join again (with a state hand-over).
constexpr int kJoinAgain = -1;

int run_island_once(const config::Config& config, int island, const ProcessOptions& options) {
  const auto t0 = Clock::now();
  const int k = config.islands.count;
  if (island < 0 || island >= k) {
    throw UserError("--id " + std::to_string(island) + ": must be in [0, " + std::to_string(k) +
                    ") (islands.count is " + std::to_string(k) + ")");
  }
  sim::validate_config(config, sim::Target::kIsland);
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
  // Joined without a data endpoint, the island takes part in no collective until it holds
  // the state it starts from (the initial model, or a hand-over) and publishes it.
  const std::string endpoint = data_endpoint(t, island);
  cc.data_endpoint = "";
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
  transport::ZmqControlClient& joined = *client.value();
  const uint64_t join_epoch = joined.membership().epoch;
  // With launch --emulate-wan, peers are dialled through the relays of this island's links.
  PeerRoutes control(joined, options.peer_endpoints);

  // A run that is already going: wait for a live island to hand its state over.
  auto started = joined.store_peek(kStartedKey);
  if (!started.is_ok()) {
    ATOLL_ERROR("island " << island << ": " << started.status().to_string());
    return 1;
  }
  std::optional<Handover> handover;
  if (started.value()) {
    if (Status st = check_rejoin(config, *parts.algorithm); !st.is_ok()) {
      ATOLL_ERROR("island " << island << ": the run is already going: " << st.message());
      return 1;
    }
    ATOLL_INFO("island " << island << ": the run is already going; waiting for a live island's state");
    auto got = fetch_handover(control, island, join_epoch, Clock::now() + std::chrono::seconds(300), [&]() -> Status {
      if (!joined.status().is_ok()) return joined.status();
      for (const auto& p : control.membership().members) {
        if (p.id != island && transport::in_collectives(p)) return Status::ok();
      }
      return Status(StatusCode::kPeerLost, "no live island is left to hand its state over (the run has ended)");
    });
    if (!got.is_ok()) {
      ATOLL_ERROR("island " << island << ": cannot rejoin the run: " << got.status().to_string());
      return 1;
    }
    handover = std::move(got.value());
  }

  transport::ZmqGroupOptions go;
  go.bind = endpoint;
  go.first_seq = handover ? handover->first_seq : 0;  // the donor's next collective
  go.star = t.collective == "star";
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
  if (Status st = joined.publish_endpoint(endpoint, Clock::now() + std::chrono::seconds(60)); !st.is_ok()) {
    ATOLL_ERROR("island " << island << ": " << st.to_string());
    return 1;
  }

  if (!handover) {
    // Start together: every configured island must take part before the first step.
    auto view = control.membership();
    auto ready = [&] {
      return std::count_if(view.members.begin(), view.members.end(), transport::in_collectives) >= k;
    };
    const auto join_deadline = Clock::now() + std::chrono::seconds(300);
    while (!ready() && Clock::now() < join_deadline) {
      view = control.wait_for_change(view.epoch, Clock::now() + std::chrono::milliseconds(500));
    }
    if (!ready()) {
      ATOLL_ERROR("island " << island << ": only " << view.members.size() << " of " << k
                            << " islands joined within 300 s");
      return 1;
    }
    if (Status st = control.store_set(kStartedKey, {1}); !st.is_ok()) {
      ATOLL_ERROR("island " << island << ": " << st.to_string());
      return 1;
    }
  }

  algorithms::IslandContext ctx;
  ctx.island = island;
  ctx.params = parts.model->params();
  ctx.grads = parts.model->grads();
  // Round records' sync_s is the wall time blocked in the exchange. An island the coordinator
  // declared dead while it was cut off comes back (its client joins again) into a run that
  // went on without it: its waits are abandoned instead of waiting for collectives the
  // others finished, and run_island() joins the run again with a state hand-over (or, where
  // that is not possible, the island fails).
  auto in_run = [&joined, island]() -> Status {
    if (!joined.status().is_ok()) return joined.status();
    if (joined.joins() > 1) {
      return Status(StatusCode::kPeerLost, "island " + std::to_string(island) +
                                               " was declared dead while cut off from the run, which went on without it");
    }
    return Status::ok();
  };
  WatchedGroup timed(group, in_run);
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
  if (handover) {
    // As the simulator's joiners: the global model, a fresh inner optimizer and algorithm, the
    // donor's outer state after setup, and the steps after the donor's.
    {
      at::NoGradGuard no_grad;
      parts.model->params().copy_(handover->global);
    }
    // The hand-over travels on the CPU; the donor kept its outer state beside its parameters.
    for (at::Tensor& t : handover->state.tensors) {
      if (t.defined()) t = t.to(parts.model->params().device());
    }
    loop.first_step = handover->step + 1;
    loop.after_setup = [&] { parts.algorithm->import_state(ctx, handover->state); };
    steps = handover->step;
    control.record(sim::JsonObject()
                       .add("event", "rejoin")
                       .add("island", island)
                       .add("donor", handover->donor)
                       .add("step", handover->step)
                       .add("round", handover->state.rounds)
                       .add("first_seq", handover->first_seq)
                       .add("epoch", handover->epoch)
                       .add("wall_time_s", seconds_since(t0))
                       .str());
  } else if (evaluator && !parts.algorithm->global_on_server()) {
    evaluate(0, parts.model->params());
  }
  // Hands this island's state to islands that rejoin, when it is the donor (zmq only).
  std::optional<HandoverDonor> donor;
  if (check_rejoin(config, *parts.algorithm).is_ok()) {
    auto& zmq_group = static_cast<transport::ZmqGroup&>(group);
    donor.emplace(
        control,
        [&] {
          Handover h;
          h.donor = island;
          h.step = steps;
          h.first_seq = zmq_group.next_seq();
          h.global = parts.algorithm->global_params();
          h.state = parts.algorithm->export_state();
          return h;
        },
        [&](const std::string& json) { control.record(json); }, in_run);
  }
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
    if (donor && parts.algorithm->can_hand_over()) donor->at_step_boundary();
  };
  try {
    sim::run_island(loop);
  } catch (const std::exception& e) {
    // Everything here unwinds (the control client LEAVEs) before the island joins again.
    if (joined.joins() > 1 && config.transport.max_rejoins > 0 && check_rejoin(config, *parts.algorithm).is_ok()) {
      ATOLL_WARN("island " << island << ": declared dead while cut off from the run at step " << steps
                           << " (" << e.what() << "); joining it again");
      return kJoinAgain;
    }
    throw;
  }
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
                     .add("global_xxh64", parts.algorithm->global_on_server()
                                              ? std::string()
                                              : sim::params_xxh64_hex(parts.algorithm->global_params()))
                     .str());
  if (island == 0 && !parts.algorithm->global_on_server()) {
    const std::string dir = config.run.out_dir + "/" + config.run.name;
    sim::write_params(dir + "/final_params.bin", parts.algorithm->global_params());
  }
  return 0;
}

}  // namespace

int run_island(const config::Config& config, int island, const ProcessOptions& options) {
  for (int rejoins = 0;; ++rejoins) {
    const int rc = run_island_once(config, island, options);
    if (rc != kJoinAgain) return rc;
    if (rejoins == config.transport.max_rejoins) {
      ATOLL_ERROR("island " << island << ": declared dead while cut off from the run "
                            << rejoins + 1 << " times (transport.max_rejoins = "
                            << config.transport.max_rejoins << "); giving up");
      return 1;
    }
  }
}

}  // namespace atl::run
