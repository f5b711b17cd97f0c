// `atoll island CONFIG --id K`: one island of a real run. Builds exactly what the
// simulator's island K builds (src/core/island_parts.h), joins the coordinator, waits for
// its decision to start the run (src/run/start_gate.h), then runs the same island runtime as the simulator
// (src/core/island_runtime.h) over ZeroMQ or Gloo (transport.kind), with the wall clock, the
// coordinator as record sink and its membership deciding the lead. Started again while the
// run is going (after a crash), it rejoins: it waits for a live island's state hand-over
// (src/run/handover.h) and goes on from there.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
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
#include "src/run/process_checkpoint.h"
#include "src/run/processes.h"
#include "src/run/run_identity.h"
#include "src/run/start_gate.h"
#include "src/run/wan_routes.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/components.h"
#include "src/core/island_runtime.h"
#include "src/core/island_parts.h"
#include "src/core/progress.h"
#include "src/core/run_dir.h"
#include "src/core/sim_checkpoint.h"
#include "src/core/validate.h"
#include "src/core/wall_time.h"
#include "transport/zmq/control_client.h"
#include "transport/zmq/curve.h"
#include "transport/kinds.h"

namespace atl::run {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string data_endpoint(const config::TransportConfig& t, int island) {
  return "tcp://" + t.host + ":" + std::to_string(t.base_port + island);
}

// Set in the store by every island before its first step: an island that finds it when it
// joins comes into a run that is already going.
const char kStartedKey[] = "atoll/run/started";
// Set by the island that evaluated step S once its eval record is sent (src/core/eval_role.h).
// DiPaCo: per path (each path's evaluator records its path_eval record).
std::string eval_key(int64_t step, int path) {
  return "atoll/eval/" + std::to_string(step) + (path < 0 ? "" : "/path" + std::to_string(path));
}

// Rejoining hands over the global model and Algorithm::export_state(); these setups keep more.
Status check_rejoin(const config::Config& config, const algorithms::Algorithm& algorithm) {
  std::string why;
  const transport::TransportKind* kind = transport::find_transport_kind(config.transport.kind);
  if (kind && kind->no_handover) why = "transport.kind " + config.transport.kind + " (" + kind->no_handover + ")";
  else if (algorithm.global_on_server()) why = config.algorithm.name + " (its global model lives in the coordinator's server role)";
  else if (config.algorithm.name == "dipaco" && core::dipaco_paths(config).paths() > config.islands.count)
    why = "dipaco with fewer islands than paths (the islands take the paths in turn; no island holds another's state)";
  if (why.empty()) return Status::ok();
  return Status(StatusCode::kUnavailable, "rejoining a running run is not supported with " + why);
}

}  // namespace

namespace {

// How one life of an island in the run ended: it ran all its steps, or it was declared dead
// while cut off and came back into a run that went on without it, and is to join again
// (with a state hand-over).
enum class IslandEnd { kFinished, kJoinAgain };

// Prefixes "island K: " to a failure's message.
Status failed(int island, const Status& st, const std::string& what = "") {
  return Status(st.code(), "island " + std::to_string(island) + ": " + what + st.message());
}

// One life of island `island` in the run. Expected failures (the coordinator cannot be
// reached, nobody can hand the state over, the islands do not all join) are returned;
// user errors throw atl::UserError; a failure of the run itself mid-way throws.
StatusOr<IslandEnd> run_island_once(const config::Config& config, int island, const ProcessOptions& options) {
  const auto t0 = Clock::now();
  const int k = config.islands.count;
  if (island < 0 || island >= k) {
    throw UserError("--id " + std::to_string(island) + ": must be in [0, " + std::to_string(k) +
                    ") (islands.count is " + std::to_string(k) + ")");
  }
  core::validate_config(config, core::Target::kIsland);
  core::configure_threads(config.run.threads);
  torch::manual_seed(config.run.seed);
  core::RunData data = core::load_run_data(config);
  const auto algo_options = core::algorithm_options(config, data.shard_sizes);
  const compression::Pipeline codec = core::make_pipeline(config);
  core::IslandParts parts = core::make_island_parts(config, data, algo_options, island);
  // Any island may have to evaluate: the lead's role moves when it dies (see below).
  std::unique_ptr<core::Evaluator> evaluator;
  if (!parts.algorithm->global_on_server()) evaluator = core::make_evaluator(config, data);
  check_min_islands(config, parts.algorithm->global_on_server());

  const auto& t = config.transport;
  transport::ControlClientOptions cc;
  cc.coordinator = t.coordinator;
  cc.island = island;
  cc.run = run_identity(config);
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
    cc.give_up_when_refused = true;  // a refused island exits at once (the run goes on without it)
  }
  const auto join_timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t.join_timeout_s));
  auto client = transport::ZmqControlClient::connect(cc, Clock::now() + join_timeout);
  if (!client.is_ok()) return failed(island, client.status(), "cannot join " + t.coordinator + ": ");
  transport::ZmqControlClient& joined = *client.value();
  const uint64_t join_epoch = joined.membership().epoch;
  // With launch --emulate-wan, peers are dialled through the relays of this island's links.
  PeerRoutes control(joined, options.peer_endpoints);

  // A run that is already going: wait for a live island to hand its state over.
  auto started = joined.store_peek(kStartedKey);
  if (!started.is_ok()) return failed(island, started.status());
  bool late = started.value().has_value();
  // Checkpoints (docs/checkpoints.md "Real runs"): --resume tells the coordinator which
  // checkpoints this island holds whole; it picks the newest one every island has.
  const int64_t ckpt_every = config.checkpoint.every;
  const std::string ckpt_hash = core::resume_hash(config);
  checkpoint::CheckpointDir ckpt_dir(island_checkpoint_dir(config, island), config.checkpoint.keep + 1);
  if (config.run.resume && !late) {
    const std::vector<int64_t> have = usable_island_steps(
        ckpt_dir.path(), ckpt_hash, island, [&](const std::string& line) { ATOLL_WARN("island " << island << ": " << line); });
    const std::string text = steps_text(have);
    if (Status st = joined.store_set(resume_have_key(island), {text.begin(), text.end()}); !st.is_ok())
      return failed(island, st);
  }
  // Otherwise the coordinator's decision: the islands that start (src/run/start_gate.h).
  std::vector<int> start_set;
  if (!late) {
    auto got = joined.store_get(kRunStartKey, Clock::now() + join_timeout + std::chrono::seconds(60));
    if (!got.is_ok()) return failed(island, got.status(), "no start decision from the coordinator: ");
    auto decision = parse_start(got.value());
    if (!decision.is_ok()) return failed(island, decision.status());
    if (!decision->start) {
      return Status(StatusCode::kUnavailable, "island " + std::to_string(island) + ": the run did not start: " + decision->why);
    }
    start_set = decision->islands;
    late = std::find(start_set.begin(), start_set.end(), island) == start_set.end();
    if (late && config.run.resume) {
      // A fedavg client whose plan had ended before the checkpoint resumed from runs nothing
      // again (its records are in metrics.jsonl up to the cut).
      auto finished = joined.store_peek(kFinishedKey);
      if (!finished.is_ok()) return failed(island, finished.status());
      const std::vector<int64_t> ids =
          finished.value() ? parse_steps(std::string(finished.value()->begin(), finished.value()->end()))
                           : std::vector<int64_t>{};
      if (std::find(ids.begin(), ids.end(), island) != ids.end()) {
        ATOLL_INFO("island " << island << ": it had finished before the checkpoint resumed from; nothing to run");
        return IslandEnd::kFinished;
      }
    }
  }
  // Who leads and who hands state over (core::Roles), on this island's view: the members
  // that take part in collectives.
  const core::Roles roles(config);
  auto running = [&control] {
    std::vector<int> ids;
    for (const auto& p : control.membership().members)
      if (transport::in_collectives(p)) ids.push_back(p.id);
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  // The checkpoint this island resumes from (the coordinator set the key before the start).
  std::optional<IslandProcessCheckpoint> resumed;
  if (config.run.resume && !late) {
    auto got = joined.store_peek(kResumeKey);
    if (!got.is_ok()) return failed(island, got.status());
    const std::string value = got.value() ? std::string(got.value()->begin(), got.value()->end()) : "fresh";
    if (value.rfind("step:", 0) == 0) {
      const std::vector<int64_t> step = parse_steps(value.substr(5));
      if (step.size() != 1) return failed(island, corrupt("malformed resume decision '" + value + "'"));
      const std::string path = ckpt_dir.path() + "/" + checkpoint::CheckpointDir::file_name(step[0]);
      auto file = checkpoint::read_checkpoint(path);
      if (!file.is_ok()) return failed(island, file.status(), "cannot resume: ");
      auto c = decode_island(file.value(), "checkpoint '" + path + "'");
      if (!c.is_ok()) return failed(island, c.status(), "cannot resume: ");
      resumed = std::move(c.value());
      ATOLL_INFO("island " << island << ": resuming after step " << resumed->step << " from " << path);
    }
  }
  // A fresh start: checkpoints of an earlier run of this directory are not this run's.
  if (!late && !resumed) {
    for (const auto& e : ckpt_dir.list()) std::filesystem::remove(e.path);
  }
  std::optional<Handover> handover;
  if (late) {
    if (Status st = check_rejoin(config, *parts.algorithm); !st.is_ok()) {
      return failed(island, st, "the run is already going: ");
    }
    ATOLL_INFO("island " << island << ": the run " << (started.value() ? "is already going" : "started without this island")
                         << "; waiting for a live island's state (joining as a rejoiner)");
    auto got = fetch_handover(control, island, join_epoch, Clock::now() + std::chrono::seconds(300), [&]() -> Status {
      if (!joined.status().is_ok()) return joined.status();
      if (roles.donor(island, running()) >= 0) return Status::ok();
      return Status(StatusCode::kPeerLost, roles.eval_path(island) >= 0 ? "no live island on this island's path is left to hand its state over"
                                                     : "no live island is left to hand its state over (the run has ended)");
    });
    if (!got.is_ok()) return failed(island, got.status(), "cannot rejoin the run: ");
    handover = std::move(got.value());
  }

  DataPlaneStart where;
  where.bind = endpoint;
  where.first_seq = handover ? handover->first_seq : 0;  // the donor's next collective
  if (handover) where.first_seqs = handover->subgroup_seqs;  // and its sub-groups' (dipaco)
  if (resumed) {  // where the checkpoint's groups were
    where.first_seqs = resumed->group_seqs;
    where.first_seq = where.first_seqs[0];
    where.first_seqs.erase(0);
    where.in_flight = resumed->in_flight;
  }
  where.curve_public_key = cc.curve_keys.public_key;
  where.curve_secret_key = cc.curve_keys.secret_key;
  std::unique_ptr<transport::NetGroup> data_plane = make_data_plane(t, control, std::move(where));
  transport::Group& group = *data_plane;
  if (Status st = joined.publish_endpoint(endpoint, Clock::now() + std::chrono::seconds(60)); !st.is_ok()) {
    return failed(island, st);
  }

  if (!handover) {
    // Start together: every island of the start set that is still live takes part from the
    // first step (one that died meanwhile is not waited for).
    auto view = control.membership();
    auto ready = [&] {
      for (const auto& p : view.members) {
        if (std::find(start_set.begin(), start_set.end(), p.id) != start_set.end() && !transport::in_collectives(p))
          return false;
      }
      return true;
    };
    const auto ready_deadline = Clock::now() + join_timeout;
    while (!ready() && Clock::now() < ready_deadline) {
      view = control.wait_for_change(view.epoch, Clock::now() + std::chrono::milliseconds(500));
    }
    if (!ready()) {
      return Status(StatusCode::kTimeout, "island " + std::to_string(island) +
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
         group.view().members.size() < taking_part() && Clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (Status st = control.store_set(kStartedKey, {1}); !st.is_ok()) return failed(island, st);
  }

  // An island the coordinator declared dead while it was cut off comes back (its client
  // joins again) into a run that went on without it: its waits are abandoned instead of
  // waiting for collectives the others finished, and run_island() joins the run again with
  // a state hand-over (or, where that is not possible, the island fails).
  // A coordinator that is gone (killed, its host down) may be restarted and pick the run up
  // (docs/checkpoints.md "Coordinator restart"): the island goes on meanwhile (its
  // collectives are peer to peer) and gives up after transport.join_timeout_s without it.
  auto in_run = [&joined, island, join_timeout]() -> Status {
    if (!joined.status().is_ok()) return joined.status();
    if (joined.unreachable_for() > join_timeout) {
      return Status(StatusCode::kUnavailable, "island " + std::to_string(island) +
                                                  ": the coordinator has been unreachable for longer than "
                                                  "transport.join_timeout_s");
    }
    if (joined.joins() > 1) {
      return Status(StatusCode::kPeerLost, "island " + std::to_string(island) +
                                               " was declared dead while cut off from the run, which went on without it");
    }
    return Status::ok();
  };
  // Round records' sync_s is the wall time blocked in the exchange.
  WatchedGroup timed(group, in_run);
  // The algorithm's sub-groups (dipaco) use the group, its control plane and routes: the
  // algorithm goes before them, whichever way this function is left.
  struct ReleaseAlgorithm {
    core::IslandParts& parts;
    ~ReleaseAlgorithm() { parts.algorithm.reset(); }
  } release_algorithm{parts};

  // The lead: the live island with the lowest id among those that hold the model (joiners
  // count from their hand-over on). It evaluates the global model, shows the progress line
  // and writes final_params.bin; when it dies the next island takes over
  // (src/core/eval_role.h: every eval step is recorded exactly once).
  auto is_lead = [&] { return core::Roles::leads_run(island, running()); };
  // Whether the store holds `key`; a coordinator that does not answer counts as yes (records
  // could not reach it either), so that an island never waits on it for ever.
  auto in_store = [&](const std::string& key) {
    auto v = joined.store_peek(key);
    if (!v.is_ok()) {
      ATOLL_WARN("island " << island << ": " << v.status().to_string());
      return true;
    }
    return v.value().has_value();
  };
  core::Progress progress(options.quiet ? core::Progress::Mode::kQuiet : core::Progress::Mode::kAuto);
  core::ProgressState state;
  core::WallTime wall_time;
  std::optional<HandoverDonor> donor;  // set below, once the runtime exists
  core::IslandRuntime* runtime_ptr = nullptr;  // set below, once the runtime exists

  // Checkpoints (docs/checkpoints.md "Real runs"): at a due step boundary every island writes
  // its own file, then marks it in the store (after its records up to the step, on the same
  // connection) and waits until the coordinator has written its own: every island then holds
  // the same step, and metrics.jsonl is cut at it.
  // fedavg cuts at server rounds instead (docs/checkpoints.md "fedavg: a cut at a server round").
  const bool cut_at_rounds = parts.algorithm->checkpoint_cut() == algorithms::CheckpointCut::kServerRound;
  core::CheckpointSchedule schedule(ckpt_every, handover ? handover->step : resumed ? resumed->step : 0);
  auto checkpoint_at = [&](int64_t step) {
    IslandProcessCheckpoint c;
    // First: the exchange in flight completes (its bytes and its result belong to the cut).
    c.in_flight = parts.algorithm->wait_in_flight();
    c.step = step;
    c.config_hash = ckpt_hash;
    c.island = island;
    c.islands = k;
    c.global = parts.algorithm->global_params();
    static_cast<core::IslandTraining&>(c) = core::capture_training(parts, *runtime_ptr);
    c.bytes = timed.bytes();
    c.torch_rng = at::detail::getDefaultCPUGenerator().get_state();
    c.group_seqs = static_cast<transport::NetGroup&>(group).next_seqs();
    const auto started_at = Clock::now();
    // A file that cannot be written is still marked, with why as the mark's value: the
    // coordinator counts the cut as not written (and stops the run under
    // checkpoint.on_failure: stop); a resume finds the file missing and falls back.
    std::string not_written;
    if (Status st = ckpt_dir.save(step, encode_island(c)); !st.is_ok()) {
      not_written = st.to_string().substr(0, 400);
      ATOLL_WARN("island " << island << ": checkpoint of step " << step << " not written: " << not_written);
    } else {
      ATOLL_DEBUG("island " << island << ": checkpoint of step " << step << " in " << seconds_since(started_at) << " s");
    }
    // Both wait out a coordinator that is away for a while (restarted: it picks the run up).
    const std::string what = "island " + std::to_string(island) + ": checkpoint of step " + std::to_string(step);
    auto retry = [&](const Status& st) {
      if (Status run = in_run(); !run.is_ok()) throw StatusError(what, run);
      if (st.code() != StatusCode::kTimeout) throw StatusError(what, st);
    };
    const std::vector<uint8_t> mark(not_written.begin(), not_written.end());
    for (Status st; !(st = joined.store_set(checkpoint_mark_key(step, island), mark)).is_ok();) retry(st);
    for (;;) {
      auto done = joined.store_get(checkpoint_done_key(step), Clock::now() + std::chrono::seconds(5));
      if (done.is_ok()) break;
      retry(done.status());
    }
  };

  // The checkpoints due at the boundary after `step` (of `total`), by the rule both modes
  // share (core::CheckpointSchedule; fedavg: every cut up to the round this client pulls
  // next, at the boundary where that pull is its next action; the file of cut c is step-c).
  auto at_boundary = [&](int64_t step, int64_t total) {
    for (int64_t cut : schedule.take_due(*parts.algorithm, step, total)) checkpoint_at(cut);
  };

  core::IslandHost host;
  host.time = &wall_time;
  host.wall_s = [&] { return seconds_since(t0); };
  host.record = [&](const std::string& json) { control.record(json); };
  // Each path's lead evaluates that path (a dense run: the run's lead).
  auto runtime_path_lead = [&] { return roles.leads(island, running()); };
  host.is_lead = runtime_path_lead;
  // With fewer islands than paths the lead evaluates every path in path order: a step is
  // recorded once its last path's record is.
  const int recorded_path = parts.eval_path == core::kEveryPath ? data.paths - 1 : parts.eval_path;
  host.eval_recorded = [&](int64_t step) { return in_store(eval_key(step, recorded_path)); };
  host.after_eval = [&](int64_t step, const core::EvalResult& r) {
    state.val_loss = r.loss;
    // After the record on the same connection: a step marked recorded is in metrics.jsonl.
    if (Status st = joined.store_set(eval_key(step, r.path), {1}); !st.is_ok()) {
      ATOLL_WARN("island " << island << ": " << st.to_string());
    }
  };
  host.wait = [&](double deadline_s) {  // deadline_s on wall_time's clock
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::max(0.0, deadline_s - wall_time.now_s())));
    control.wait_for_change(control.membership().epoch, deadline);
  };
  // A kept step waits this long for a live lower island before this one evaluates it.
  host.eval_patience_s = 30.0 + 2e-3 * static_cast<double>(t.heartbeat_timeout_ms);
  host.eval_bytes = [&] { return timed.bytes().sent; };
  host.round_times = [&] {
    core::RoundTimes times;
    times.sync_s = timed.take_blocked_s();
    return times;
  };
  host.after_step = [&](int64_t step, int64_t total, double loss, double) {
    state.steps_done = step;
    state.steps_total = total;
    state.last_loss = loss;
    state.bytes = timed.bytes().sent;
    if (!options.quiet && is_lead()) progress.update(state);
    // A due checkpoint, before any hand-over of this boundary: a joiner served here starts
    // after it and is not waited for.
    at_boundary(step, total);
    if (donor && parts.algorithm->can_hand_over()) donor->at_step_boundary();
  };
  // A fedavg client whose first pull (after a resume: its next) is at or past a cut arrives
  // there before its first step.
  if (cut_at_rounds) host.after_setup = [&](int64_t step) { at_boundary(step, std::numeric_limits<int64_t>::max()); };
  core::IslandRuntime runtime(island, parts, config.train, &timed, &codec, data.shard_sizes[island], evaluator.get(),
                             data.classifier, std::move(host));
  runtime_ptr = &runtime;
  if (resumed) {
    // The island's training state (core::restore_training, as in every resume), the RNG, the
    // bytes.
    core::restore_training(parts, runtime, *resumed);
    if (resumed->torch_rng.defined()) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(resumed->torch_rng);
    }
    timed.set_bytes_base(resumed->bytes);
  } else if (handover) {
    // Every joiner's start (core::IslandRuntime::join): the global model, a fresh inner
    // optimizer and algorithm, the donor's outer state after setup, the steps after the donor's.
    runtime.join(std::move(*handover), &timed);
  } else {
    runtime.evaluate_start();
  }
  // Hands this island's state to islands that rejoin, when it is the donor (transports that
  // hand over: transport/kinds.h).
  if (check_rejoin(config, *parts.algorithm).is_ok()) {
    auto& net_group = *data_plane;
    donor.emplace(
        control,
        [&] {
          std::map<uint32_t, uint64_t> subgroup_seqs = net_group.next_seqs();
          subgroup_seqs.erase(0);
          return core::export_handover(island, *parts.algorithm, runtime.steps(), net_group.next_seq(),
                                       std::move(subgroup_seqs));
        },
        [&](const std::string& json) { control.record(json); }, in_run, roles);
  }
  try {
    runtime.run();
  } catch (const std::exception& e) {
    // Everything here unwinds (the control client LEAVEs) before the island joins again.
    if (joined.joins() > 1 && config.transport.max_rejoins > 0 && check_rejoin(config, *parts.algorithm).is_ok()) {
      ATOLL_WARN("island " << island << ": declared dead while cut off from the run at step " << runtime.steps()
                           << " (" << e.what() << "); joining it again");
      return IslandEnd::kJoinAgain;
    }
    throw;
  }
  // Steps kept for a lead that may have died are recorded by someone before island_end.
  runtime.finish();
  // After island_end, on the same connection: a checkpoint cut after this lists the island as
  // finished, and a run resumed from it does not run it again (a fedavg client whose plan
  // ended before the cut).
  if (ckpt_every > 0) {
    if (Status st = joined.store_set(finished_key(island), {1}); !st.is_ok())
      ATOLL_WARN("island " << island << ": " << st.to_string());
  }
  const bool lead = is_lead();
  if (lead) progress.finish(state);
  // The final parameter files this island writes (core::IslandRuntime::write_final_outputs:
  // the lead's, each path's lead's; the coordinator writes the server's), each once: the
  // store says which an island has written. One that cannot be written (disk full) fails this
  // island, and the coordinator is told first: its summary.json then says the run failed, and why.
  auto key_of = [](int path) {
    return path < 0 ? std::string(kFinalParamsKey) : std::string(kFinalParamsKey) + "/path" + std::to_string(path);
  };
  try {
    runtime.write_final_outputs(
        config.run.out_dir + "/" + config.run.name, roles, running(), [&](int path) { return !in_store(key_of(path)); },
        [&](int path) {
          if (Status st = joined.store_set(key_of(path), {1}); !st.is_ok())
            ATOLL_WARN("island " << island << ": " << st.to_string());
        });
  } catch (const core::OutputError& e) {
    const std::string why = std::string(e.what()).substr(0, 1000);
    if (Status st = joined.store_set(kFinalParamsFailedKey, {why.begin(), why.end()}); !st.is_ok())
      ATOLL_WARN("island " << island << ": " << st.to_string());
    throw;
  }
  return IslandEnd::kFinished;
}

}  // namespace

Status run_island(const config::Config& config, int island, const ProcessOptions& options) {
  for (int rejoins = 0;; ++rejoins) {
    StatusOr<IslandEnd> end = run_island_once(config, island, options);
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
