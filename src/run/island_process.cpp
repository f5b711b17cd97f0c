// `atoll island CONFIG --id K`: one island of a real run, as a composition (IslandProcess
// below; docs/architecture.md "The run layer"). It builds island K's parts as every mode does
// (src/core/island_parts.h), joins the coordinator, waits for its decision to start the run
// (src/run/start_gate.h), then runs the island runtime both modes run
// (src/core/island_runtime.h) over ZeroMQ or Gloo (transport.kind), with the wall clock, the
// coordinator as record sink and its membership deciding the roles (core::Roles). Started
// again while the run is going (after a crash), it rejoins: it takes a live island's state
// hand-over (core::Handover, carried by src/run/handover.h) and goes on from there.
// Its checkpoints, signal cuts and hand-overs to joiners are src/run/island_cuts.cpp; the
// other ranks of an island are src/run/island_rank.cpp.
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "src/base/log.h"
#include "src/base/status.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/run/data_plane.h"
#include "src/run/handover.h"
#include "src/run/hosts.h"
#include "src/run/island_process.h"
#include "src/run/island_ranks.h"
#include "src/run/process_checkpoint.h"
#include "src/run/processes.h"
#include "src/run/run_identity.h"
#include "src/run/shard_plane.h"
#include "src/run/start_gate.h"
#include "src/run/wan_routes.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/components.h"
#include "src/core/island_runtime.h"
#include "src/core/island_parts.h"
#include "src/core/progress.h"
#include "src/core/roles.h"
#include "src/core/run_dir.h"
#include "src/core/sim_checkpoint.h"
#include "src/core/validate.h"
#include "src/core/wall_time.h"
#include "transport/zmq/control_client.h"
#include "transport/zmq/curve.h"
#include "transport/kinds.h"
#include "transport/shards.h"

namespace atl::run {

namespace {

// SIGTERM or SIGINT to an island process that trains (Slurm's scancel or requeue, a job's
// time limit, Ctrl-C through launch): the island leaves the run at its next step boundary or
// collective wait, unwinding so that its control client says LEAVE, and the others go on at
// once instead of after the heartbeat timeout. Before its first step (nothing to leave yet)
// and for a second signal: the default action. An island that has not left within
// kLeaveWithin exits anyway (Slurm's KillWait is 30 s by default).
std::atomic<int> g_leave_signal{0};
std::atomic<bool> g_training{false};
constexpr auto kLeaveWithin = std::chrono::seconds(10);
extern "C" void leave_on_signal(int sig) {
  std::signal(sig, SIG_DFL);
  if (!g_training) {
    std::raise(sig);  // delivered when this handler returns
    return;
  }
  g_leave_signal = sig;
}

Status left_on_signal(int island) {
  return Status(StatusCode::kUnavailable, "island " + std::to_string(island) + ": left the run on signal " +
                                              std::to_string(g_leave_signal.load()) + " (" +
                                              ::strsignal(g_leave_signal.load()) + ")");
}

// Island K's data socket, as it binds it (transport.host; "*": every interface) and as it
// publishes it to its peers (island_address: "*" is this node's name).
std::string data_endpoint(const config::TransportConfig& t, int island) {
  return "tcp://" + t.host + ":" + std::to_string(t.base_port + island);
}
std::string published_endpoint(const config::TransportConfig& t, int island) {
  return "tcp://" + island_address(t) + ":" + std::to_string(t.base_port + island);
}

// Where island K's ranks meet (docs/ranks.md): rank 0's host, transport.rank_port + K
// (0: base_port + 400 + K).
int rank_port(const config::TransportConfig& t, int island) {
  return (t.rank_port > 0 ? t.rank_port : t.base_port + 400) + island;
}

// Set in the store by every island before its first step: an island that finds it when it
// joins comes into a run that is already going.
const char kStartedKey[] = "atoll/run/started";
// Set by the island that evaluated step S once its eval record is sent (src/core/eval_role.h).
// A run of several paths: per path (each path's evaluator records its path_eval record).
std::string eval_key(int64_t step, int path) {
  return "atoll/eval/" + std::to_string(step) + (path < 0 ? "" : "/path" + std::to_string(path));
}

// Rejoining hands over the global model and Algorithm::export_state(); these setups keep more.
Status check_rejoin(const config::Config& config, const algorithms::Algorithm& algorithm) {
  std::string why;
  const transport::TransportKind* kind = transport::find_transport_kind(config.transport.kind);
  if (kind && kind->no_handover) why = "transport.kind " + config.transport.kind + " (" + kind->no_handover + ")";
  else if (algorithm.global_on_server()) why = config.algorithm.name + " (its global model lives in the coordinator's server role)";
  else if (core::eval_path_of(config, 0) == core::kEveryPath)
    why = config.algorithm.name + " with fewer islands than paths (the islands take the paths in turn; no island holds "
                                  "another's state)";
  if (why.empty()) return Status::ok();
  return Status(StatusCode::kUnavailable, "rejoining a running run is not supported with " + why);
}

}  // namespace

IslandProcess::IslandProcess(const config::Config& config, int island, const ProcessOptions& options,
                             IslandRanks* ranks)
    : config_(config),
      island_(island),
      options_(options),
      t0_(Clock::now()),
      k_(config.islands.count),
      ckpt_hash_(core::resume_hash(config)),
      ckpt_dir_(island_checkpoint_dir(config, island), config.checkpoint.keep + 1),
      roles_(config),
      progress_(options.quiet ? core::Progress::Mode::kQuiet : core::Progress::Mode::kAuto),
      ranks_(ranks) {
  if (island < 0 || island >= k_) {
    throw UserError("--id " + std::to_string(island) + ": must be in [0, " + std::to_string(k_) +
                    ") (islands.count is " + std::to_string(k_) + ")");
  }
  core::validate_config(config, core::Target::kIsland);
  core::configure_threads(config.run.threads);
  torch::manual_seed(config.run.seed);
  data_ = core::load_run_data(config);
  algo_options_ = core::algorithm_options(config, data_.shard_sizes);
  codec_ = core::make_pipeline(config);
  parts_ = core::make_island_parts(config, data_, algo_options_, island);
  if (!parts_.algorithm->global_on_server()) evaluator_ = core::make_evaluator(config, data_);
  check_min_islands(config, parts_.algorithm->global_on_server());
  join_timeout_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.transport.join_timeout_s));
}

StatusOr<IslandEnd> IslandProcess::run() {
  if (Status st = join(); !st.is_ok()) return st;
  StatusOr<bool> runs = decide_start();
  if (!runs.is_ok()) return runs.status();
  if (!runs.value()) {
    tell_ranks(IslandStart::kNothing);
    return IslandEnd::kFinished;
  }
  if (Status st = load_resume_point(); !st.is_ok()) return st;
  // A fresh start: checkpoints of an earlier run of this directory are not this run's.
  if (!late_ && !resumed_) {
    for (const auto& e : ckpt_dir_.list()) std::filesystem::remove(e.path);
  }
  if (late_) {
    if (Status st = fetch_state(); !st.is_ok()) return st;
  }
  tell_ranks(handover_ ? IslandStart::kJoin : resumed_ ? IslandStart::kResume : IslandStart::kFresh);
  if (Status st = start_data_plane(); !st.is_ok()) return st;
  make_runtime();
  return train();
}

void IslandProcess::tell_ranks(IslandStart::Kind kind) {
  if (ranks_ == nullptr) return;
  IslandStart start;
  start.kind = kind;
  if (kind == IslandStart::kResume) {
    const std::string file = checkpoint::encode(encode_island(*resumed_));
    start.payload.assign(file.begin(), file.end());
  } else if (kind == IslandStart::kJoin) {
    start.payload = encode_handover(*handover_);
  }
  broadcast_start(*ranks_, std::move(start));
}

Status IslandProcess::join() {
  const auto& t = config_.transport;
  cc_.coordinator = t.coordinator;
  if (coordinator_discovered(config_)) {  // the coordinator wrote where it is into the run directory
    auto address = read_coordinator_address(config_, Clock::now() + join_timeout_);
    if (!address.is_ok()) return failed(address.status());
    cc_.coordinator = address.value();
    ATOLL_INFO("island " << island_ << ": the coordinator is at " << cc_.coordinator << " ("
                         << coordinator_address_file(config_) << ")");
    // A coordinator restarted elsewhere (requeued onto another node) writes its new address
    // there: while the old one does not answer, the client follows the file.
    cc_.locate = [file = coordinator_address_file(config_)] { return coordinator_address_in(file); };
  }
  cc_.island = island_;
  cc_.run = run_identity(config_);
  // Joined without a data endpoint, the island takes part in no collective until it holds
  // the state it starts from (the initial model, or a hand-over) and publishes it.
  cc_.data_endpoint = "";
  cc_.heartbeat_ms = t.heartbeat_ms;
  cc_.heartbeat_timeout_ms = t.heartbeat_timeout_ms;
  if (t.curve) {
    auto keys = transport::curve::load_keypair(t.keys_dir, "island-" + std::to_string(island_));
    if (!keys.is_ok()) throw UserError("transport.keys_dir: " + keys.status().message());
    auto server = transport::curve::load_public_key(t.keys_dir + "/coordinator.pub");
    if (!server.is_ok()) throw UserError("transport.keys_dir: " + server.status().message());
    cc_.curve = true;
    cc_.curve_keys = keys.value();
    cc_.curve_server_key = server.value();
    cc_.give_up_when_refused = true;  // a refused island exits at once (the run goes on without it)
  }
  auto client = transport::ZmqControlClient::connect(cc_, Clock::now() + join_timeout_);
  if (!client.is_ok()) return failed(client.status(), "cannot join " + cc_.coordinator + ": ");
  client_ = std::move(client.value());
  join_epoch_ = client_->membership().epoch;
  control_.emplace(*client_, options_.peer_endpoints);
  return Status::ok();
}

StatusOr<bool> IslandProcess::decide_start() {
  transport::ZmqControlClient& joined = *client_;
  // A run that is already going: wait for a live island to hand its state over.
  auto started = joined.store_peek(kStartedKey);
  if (!started.is_ok()) return failed(started.status());
  started_ = started.value().has_value();
  late_ = started_;
  // Checkpoints (docs/checkpoints.md "Real runs"): --resume tells the coordinator which
  // checkpoints this island holds whole; it picks the newest one every island has.
  if (config_.run.resume && !late_) {
    const std::vector<int64_t> have = usable_island_steps(ckpt_dir_.path(), ckpt_hash_, island_, [&](const std::string& line) {
      ATOLL_WARN("island " << island_ << ": " << line);
    });
    const std::string text = steps_text(have);
    if (Status st = joined.store_set(resume_have_key(island_), {text.begin(), text.end()}); !st.is_ok()) return failed(st);
  }
  if (late_) return true;
  // Otherwise the coordinator's decision: the islands that start (src/run/start_gate.h).
  auto got = joined.store_get(kRunStartKey, Clock::now() + join_timeout_ + std::chrono::seconds(60));
  if (!got.is_ok()) return failed(got.status(), "no start decision from the coordinator: ");
  auto decision = parse_start(got.value());
  if (!decision.is_ok()) return failed(decision.status());
  if (!decision->start) {
    return Status(StatusCode::kUnavailable, "island " + std::to_string(island_) + ": the run did not start: " + decision->why);
  }
  start_set_ = decision->islands;
  late_ = std::find(start_set_.begin(), start_set_.end(), island_) == start_set_.end();
  if (late_ && config_.run.resume) {
    // A fedavg client whose plan had ended before the checkpoint resumed from runs nothing
    // again (its records are in metrics.jsonl up to the cut).
    auto finished = joined.store_peek(kFinishedKey);
    if (!finished.is_ok()) return failed(finished.status());
    const std::vector<int64_t> ids = finished.value()
                                         ? parse_steps(std::string(finished.value()->begin(), finished.value()->end()))
                                         : std::vector<int64_t>{};
    if (std::find(ids.begin(), ids.end(), island_) != ids.end()) {
      ATOLL_INFO("island " << island_ << ": it had finished before the checkpoint resumed from; nothing to run");
      return false;
    }
  }
  return true;
}

// A rejoiner's state: a live island's hand-over (src/run/handover.h).
Status IslandProcess::fetch_state() {
  if (Status st = check_rejoin(config_, *parts_.algorithm); !st.is_ok()) return failed(st, "the run is already going: ");
  ATOLL_INFO("island " << island_ << ": the run " << (started_ ? "is already going" : "started without this island")
                       << "; waiting for a live island's state (joining as a rejoiner)");
  auto got = fetch_handover(*control_, island_, join_epoch_, Clock::now() + std::chrono::seconds(300), [&]() -> Status {
    if (!client_->status().is_ok()) return client_->status();
    if (roles_.donor(island_, running()) >= 0) return Status::ok();
    return Status(StatusCode::kPeerLost, roles_.eval_path(island_) >= 0
                                             ? "no live island on this island's path is left to hand its state over"
                                             : "no live island is left to hand its state over (the run has ended)");
  });
  if (!got.is_ok()) return failed(got.status(), "cannot rejoin the run: ");
  handover_ = std::move(got.value());
  return Status::ok();
}

Status IslandProcess::start_data_plane() {
  const std::string endpoint = data_endpoint(config_.transport, island_);
  DataPlaneStart where;
  where.bind = endpoint;
  where.first_seq = handover_ ? handover_->first_seq : 0;  // the donor's next collective
  if (handover_) where.first_seqs = handover_->subgroup_seqs;  // and its sub-groups'
  if (resumed_) {  // where the checkpoint's groups were
    where.first_seqs = resumed_->group_seqs;
    where.first_seq = where.first_seqs[0];
    where.first_seqs.erase(0);
    where.in_flight = resumed_->in_flight;
  }
  // islands.shard_exchange: the ranks' shard planes' (put there by checkpoint_at, the donor).
  if (ranks_ != nullptr) rank_shard_.seqs = take_shard_seqs(where.first_seqs, ranks_->ranks());
  where.curve_public_key = cc_.curve_keys.public_key;
  where.curve_secret_key = cc_.curve_keys.secret_key;
  data_plane_ = make_data_plane(config_.transport, *control_, std::move(where));
  if (Status st = publish_shards(); !st.is_ok()) return failed(st);
  if (island_host_discovered(config_.transport))
    ATOLL_INFO("island " << island_ << ": data plane on every interface, reached at "
                         << published_endpoint(config_.transport, island_));
  if (Status st = client_->publish_endpoint(published_endpoint(config_.transport, island_),
                                            Clock::now() + std::chrono::seconds(60));
      !st.is_ok())
    return failed(st);
  if (!handover_) {
    if (Status st = wait_for_start_set(); !st.is_ok()) return st;
  }
  // An island the coordinator declared dead while it was cut off comes back (its client
  // joins again) into a run that went on without it: its waits are abandoned instead of
  // waiting for collectives the others finished, and run_island() joins the run again with
  // a state hand-over (or, where that is not possible, the island fails).
  timed_.emplace(*data_plane_, [this] { return in_run(); });
  return Status::ok();
}

// islands.shard_exchange (src/run/shard_plane.h): the other ranks' shard endpoints, gathered
// over c10d as each rank bound its shard plane (run_rank), go to the store before this
// island's data endpoint is published.
Status IslandProcess::publish_shards() {
  if (ranks_ == nullptr || !config_.islands.shard_exchange) return Status::ok();
  std::vector<std::string> endpoints;
  for (int r = 1; r < ranks_->ranks(); ++r) {
    const std::vector<uint8_t> e = ranks_->broadcast_bytes({}, r);
    endpoints.emplace_back(e.begin(), e.end());
  }
  shard_dir_.emplace(*control_, ranks_->ranks());
  if (Status st = shard_dir_->publish(island_, endpoints); !st.is_ok()) return st;
  shard_views_.emplace(*shard_dir_, *control_, ranks_->place());
  return Status::ok();
}

// Start together: every island of the start set that is still live takes part from the
// first step (one that died meanwhile is not waited for).
Status IslandProcess::wait_for_start_set() {
  PeerRoutes& control = *control_;
  auto view = control.membership();
  auto ready = [&] {
    for (const auto& p : view.members) {
      if (std::find(start_set_.begin(), start_set_.end(), p.id) != start_set_.end() && !transport::in_collectives(p))
        return false;
    }
    return true;
  };
  const auto ready_deadline = Clock::now() + join_timeout_;
  while (!ready() && Clock::now() < ready_deadline) {
    view = control.wait_for_change(view.epoch, Clock::now() + std::chrono::milliseconds(500));
  }
  if (!ready()) {
    return Status(StatusCode::kTimeout, "island " + std::to_string(island_) +
                                            ": the islands of the start set did not all publish their data "
                                            "endpoints within transport.join_timeout_s");
  }
  // The data plane reads the membership on its own thread: wait until it shows the same
  // islands, which round records count (a resumed run's first round may come at once).
  auto taking_part = [&] {
    size_t n = 0;
    for (const auto& p : control.membership().members) n += transport::in_collectives(p) ? 1 : 0;
    return n;
  };
  for (const auto until = Clock::now() + std::chrono::seconds(10);
       data_plane_->view().members.size() < taking_part() && Clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (Status st = control.store_set(kStartedKey, {1}); !st.is_ok()) return failed(st);
  return Status::ok();
}

// A coordinator that is gone (killed, its host down) may be restarted and pick the run up
// (docs/checkpoints.md "Coordinator restart"): the island goes on meanwhile (its collectives
// are peer to peer) and gives up after transport.join_timeout_s without it.
Status IslandProcess::in_run() const {
  if (g_leave_signal != 0) return left_on_signal(island_);
  if (!client_->status().is_ok()) return client_->status();
  if (client_->unreachable_for() > join_timeout_) {
    return Status(StatusCode::kUnavailable, "island " + std::to_string(island_) +
                                                ": the coordinator has been unreachable for longer than "
                                                "transport.join_timeout_s");
  }
  if (client_->joins() > 1) {
    return Status(StatusCode::kPeerLost, "island " + std::to_string(island_) +
                                             " was declared dead while cut off from the run, which went on without it");
  }
  return Status::ok();
}

// Whether the store holds `key`; a coordinator that does not answer counts as yes (records
// could not reach it either), so that an island never waits on it for ever.
bool IslandProcess::in_store(const std::string& key) {
  auto v = client_->store_peek(key);
  if (!v.is_ok()) {
    ATOLL_WARN("island " << island_ << ": " << v.status().to_string());
    return true;
  }
  return v.value().has_value();
}

std::vector<int> IslandProcess::running() const {
  std::vector<int> ids;
  for (const auto& p : control_->membership().members)
    if (transport::in_collectives(p)) ids.push_back(p.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The island runtime's host in a real run: the wall clock, the coordinator as record sink,
// the membership deciding the lead (core::Roles; src/core/eval_role.h: every eval step is
// recorded exactly once, the lead's role moves when it dies), the store saying which steps
// are recorded, and at step boundaries the progress line, checkpoints and hand-overs.
core::IslandHost IslandProcess::make_host() {
  core::IslandHost host;
  host.time = &wall_time_;
  host.wall_s = [this] { return seconds_since(t0_); };
  host.record = [this](const std::string& json) { control_->record(json); };
  // Each path's lead evaluates that path (a dense run: the run's lead).
  host.is_lead = [this] { return roles_.leads(island_, running()); };
  // With fewer islands than paths the lead evaluates every path in path order: a step is
  // recorded once its last path's record is.
  const int recorded_path = parts_.eval_path == core::kEveryPath ? data_.paths - 1 : parts_.eval_path;
  host.eval_recorded = [this, recorded_path](int64_t step) { return in_store(eval_key(step, recorded_path)); };
  host.after_eval = [this](int64_t step, const core::EvalResult& r) {
    state_.val_loss = r.loss;
    // After the record on the same connection: a step marked recorded is in metrics.jsonl.
    if (Status st = client_->store_set(eval_key(step, r.path), {1}); !st.is_ok()) {
      ATOLL_WARN("island " << island_ << ": " << st.to_string());
    }
  };
  host.wait = [this](double deadline_s) {  // deadline_s on wall_time's clock
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                             std::max(0.0, deadline_s - wall_time_.now_s())));
    control_->wait_for_change(control_->membership().epoch, deadline);
  };
  // A kept step waits this long for a live lower island before this one evaluates it.
  host.eval_patience_s = 30.0 + 2e-3 * static_cast<double>(config_.transport.heartbeat_timeout_ms);
  host.eval_bytes = [this] { return timed_->bytes().sent; };
  host.round_times = [this] {
    core::RoundTimes times;
    times.sync_s = timed_->take_blocked_s();
    return times;
  };
  host.after_step = [this](int64_t step, int64_t total, double loss, double) {
    if (g_leave_signal != 0) throw StatusError("island " + std::to_string(island_), left_on_signal(island_));
    // The coordinator ended the run (a stop policy failed it): the steps after are lost work.
    if (client_->run_ended()) throw StatusError("island " + std::to_string(island_), client_->status());
    state_.steps_done = step;
    state_.steps_total = total;
    state_.last_loss = loss;
    state_.bytes = timed_->bytes().sent;
    if (!options_.quiet && core::Roles::leads_run(island_, running())) progress_.update(state_);
    // A due checkpoint, before any hand-over of this boundary: a joiner served here starts
    // after it and is not waited for.
    follow_signal_cut(step);
    at_boundary(step, total);
    hand_over();
  };
  // A fedavg client whose first pull (after a resume: its next) is at or past a cut arrives
  // there before its first step (docs/checkpoints.md "fedavg: a cut at a server round").
  if (parts_.algorithm->checkpoint_cut() == algorithms::CheckpointCut::kServerRound)
    host.after_setup = [this](int64_t step) { at_boundary(step, std::numeric_limits<int64_t>::max()); };
  return host;
}

void IslandProcess::make_runtime() {
  schedule_.emplace(config_.checkpoint.every, handover_ ? handover_->step : resumed_ ? resumed_->step : 0);
  signal_cut_ = handover_ ? handover_->step : resumed_ ? resumed_->step : 0;  // cuts before its start are not its
  transport::Group* group = &*timed_;
  core::IslandHost host = make_host();
  if (ranks_ != nullptr) {
    if (shard_dir_) {
      // Shard 0 travels on a sub-group of the island's group, numbered as the other ranks'
      // shard planes are (transport/shards.h).
      std::vector<int> ids(static_cast<size_t>(k_));
      for (int j = 0; j < k_; ++j) ids[static_cast<size_t>(j)] = j;
      // Watched for a dropped island, but not counted: the sharded handle counts its whole
      // wait (RankShard::blocked), shard 0's included.
      auto watched = [this](uint32_t key, std::vector<int> ids) -> std::unique_ptr<transport::Group> {
        return std::make_unique<WatchedGroup>(data_plane_->subgroup(key, std::move(ids)), [this] { return in_run(); });
      };
      shard0_ = watched(transport::shard_key(0, ranks_->ranks()), std::move(ids));
      rank_shard_.group = shard0_.get();
      rank_shard_.subgroup = watched;
      rank_shard_.blocked = [this](double s) { timed_->add_blocked_s(s); };
      rank_shard_.epoch = [this] { return control_->membership().epoch; };
      timed_->add_bytes_of(&rank_shard_.others);
    }
    mirrored_ = mirrored_group(*ranks_, group, island_, shard_dir_ ? &rank_shard_ : nullptr);
    if (shard_dir_) {
      outer_shards_ = rank_outer_shards(*ranks_);
      host.outer_shards = outer_shards_.get();
    }
    mirrored_time_ = mirrored_time(*ranks_, &wall_time_);
    group = mirrored_.get();
    host.algorithm_time = mirrored_time_.get();
    host.share = {0, ranks_->ranks()};
    host.reduce_ranks = [this](at::Tensor& grads, double loss) { return ranks_->average(grads, loss); };
  }
  runtime_ = std::make_unique<core::IslandRuntime>(island_, parts_, config_.train, group, &codec_,
                                                   data_.shard_sizes[island_], evaluator_.get(), data_.classifier,
                                                   std::move(host));
  core::IslandRuntime& runtime = *runtime_;
  if (resumed_) {
    // The island's training state (core::restore_training, as in every resume), the RNG, the
    // bytes.
    restore_island(parts_, runtime, *resumed_);
    timed_->set_bytes_base(resumed_->bytes);
  } else if (handover_) {
    // Every joiner's start (core::IslandRuntime::join): the global model, a fresh inner
    // optimizer and algorithm, the donor's outer state after setup, the steps after the donor's.
    runtime.join(std::move(*handover_), group);
  } else {
    runtime.evaluate_start();
  }
  // Hands this island's state to islands that rejoin, when it is the donor (transports that
  // hand over: transport/kinds.h).
  if (check_rejoin(config_, *parts_.algorithm).is_ok()) {
    donor_.emplace(
        *control_,
        [this] {
          std::map<uint32_t, uint64_t> subgroup_seqs = data_plane_->next_seqs();
          subgroup_seqs.erase(0);
          if (shard_dir_) put_shard_seqs(rank_shard_.seqs, subgroup_seqs);
          return core::export_handover(island_, *parts_.algorithm, runtime_->steps(), data_plane_->next_seq(),
                                       std::move(subgroup_seqs));
        },
        [this](const std::string& json) { control_->record(json); }, [this] { return in_run(); }, roles_);
  }
}

StatusOr<IslandEnd> IslandProcess::train() {
  g_training = true;
  try {
    runtime_->run();
  } catch (const std::exception& e) {
    // Everything here unwinds (the control client LEAVEs) before the island joins again.
    // An island of several ranks joins again as a whole, restarted (its other ranks have
    // ended with this one).
    if (g_leave_signal == 0 && !client_->run_ended() && client_->joins() > 1 && config_.transport.max_rejoins > 0 && ranks_ == nullptr &&
        check_rejoin(config_, *parts_.algorithm).is_ok()) {
      ATOLL_WARN("island " << island_ << ": declared dead while cut off from the run at step " << runtime_->steps()
                           << " (" << e.what() << "); joining it again");
      return IslandEnd::kJoinAgain;
    }
    throw;
  }
  if (ranks_ != nullptr) {
    if (shard_dir_) {
      ATOLL_INFO("island " << island_ << " rank 0: sent " << data_plane_->bytes().sent << " bytes (the island's ranks: "
                           << timed_->bytes().sent << ")");
      log_outer_state(*outer_shards_, "island " + std::to_string(island_) + " rank 0");
    }
    if (Status st = ranks_->check_replica(parts_.model->params()); !st.is_ok()) throw StatusError("island " + std::to_string(island_), st);
  }
  // Steps kept for a lead that may have died are recorded by someone before island_end.
  runtime_->finish();
  // After island_end, on the same connection: a checkpoint cut after this lists the island as
  // finished, and a run resumed from it does not run it again (a fedavg client whose plan
  // ended before the cut).
  if (config_.checkpoint.every > 0) {
    if (Status st = client_->store_set(finished_key(island_), {1}); !st.is_ok())
      ATOLL_WARN("island " << island_ << ": " << st.to_string());
  }
  if (core::Roles::leads_run(island_, running())) progress_.finish(state_);
  write_outputs();
  return IslandEnd::kFinished;
}

// The final parameter files this island writes (core::IslandRuntime::write_final_outputs: the
// lead's, each path's lead's; the coordinator writes the server's), each once: the store says
// which an island has written. One that cannot be written (disk full) fails this island, and
// the coordinator is told first: its summary.json then says the run failed, and why.
void IslandProcess::write_outputs() {
  auto key_of = [](int path) {
    return path < 0 ? std::string(kFinalParamsKey) : std::string(kFinalParamsKey) + "/path" + std::to_string(path);
  };
  try {
    runtime_->write_final_outputs(
        config_.run.out_dir + "/" + config_.run.name, roles_, running(),
        [&](int path) { return !in_store(key_of(path)); },
        [&](int path) {
          if (Status st = client_->store_set(key_of(path), {1}); !st.is_ok())
            ATOLL_WARN("island " << island_ << ": " << st.to_string());
        });
  } catch (const core::OutputError& e) {
    const std::string why = std::string(e.what()).substr(0, 1000);
    if (Status st = client_->store_set(kFinalParamsFailedKey, {why.begin(), why.end()}); !st.is_ok())
      ATOLL_WARN("island " << island_ << ": " << st.to_string());
    throw;
  }
}

Status run_island(const config::Config& config, int island, const ProcessOptions& options) {
  g_leave_signal = 0;
  static std::once_flag watchdog;
  std::call_once(watchdog, [] {
    std::thread([] {
      while (g_leave_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::this_thread::sleep_for(kLeaveWithin);
      ::_exit(128 + g_leave_signal);
    }).detach();
  });
  // Before the rendezvous, which may wait: a signal meanwhile has its meaning already.
  arm_checkpoint_signal(options.rank == 0);
  std::unique_ptr<IslandRanks> ranks;
  if (const int r = config.islands.ranks.of(island); r > 1) {
    if (options.rank < 0 || options.rank >= r)
      throw UserError("--rank " + std::to_string(options.rank) + ": island " + std::to_string(island) + " has " +
                      std::to_string(r) + " ranks (islands.ranks)");
    RankPlace place;
    place.island = island;
    place.rank = options.rank;
    place.ranks = r;
    // Without Slurm's word (or --rank0-host) rank 0 is on this node: launch starts an
    // island's ranks on one host.
    place.rank0_host = options.rank0_host.empty() ? island_address(config.transport) : options.rank0_host;
    place.port = rank_port(config.transport, island);
    place.bind_host = island_address(config.transport);
    const auto join = std::chrono::milliseconds(static_cast<int64_t>(config.transport.join_timeout_s * 1e3));
    auto got = IslandRanks::connect(place, join, join + std::chrono::minutes(30));
    if (!got.is_ok()) return got.status();
    ranks = std::move(got.value());
    ATOLL_INFO("island " << island << ": rank " << options.rank << " of " << r << " joined its island");
    if (options.rank > 0) return run_rank(config, island, *ranks, options.peer_endpoints);  // SIGTERM's default action: it just ends
  } else if (options.rank != 0) {
    throw UserError("--rank " + std::to_string(options.rank) + ": island " + std::to_string(island) +
                    " has one rank (islands.ranks)");
  }
  std::signal(SIGTERM, leave_on_signal);
  std::signal(SIGINT, leave_on_signal);
  if (ranks) {
    StatusOr<IslandEnd> end = IslandProcess(config, island, options, ranks.get()).run();
    if (!end.is_ok()) return end.status();
    if (end.value() == IslandEnd::kFinished) return Status::ok();
    return Status(StatusCode::kPeerLost, "island " + std::to_string(island) +
                                             ": declared dead while cut off from the run; an island of several ranks "
                                             "rejoins when all its ranks are started again");
  }
  for (int rejoins = 0;; ++rejoins) {
    if (g_leave_signal != 0) return left_on_signal(island);
    StatusOr<IslandEnd> end = IslandProcess(config, island, options).run();
    if (!end.is_ok()) return end.status();
    if (end.value() == IslandEnd::kFinished) return Status::ok();
    if (rejoins == config.transport.max_rejoins) {
      return Status(StatusCode::kPeerLost, "island " + std::to_string(island) +
                                               ": declared dead while cut off from the run " +
                                               std::to_string(rejoins + 1) + " times (transport.max_rejoins = " +
                                               std::to_string(config.transport.max_rejoins) + "); giving up");
    }
  }
}

}  // namespace atl::run
