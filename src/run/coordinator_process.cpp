// `atoll coordinator CONFIG`: membership, rendezvous, the server role and the run
// directory of a real run, as a composition (CoordinatorProcess below; docs/architecture.md
// "The run layer"). Decides when the run starts and with which islands
// (src/run/start_gate.h). Ends when the run has started and every island has left again
// (finished, or declared dead), soon after a start that failed, or on SIGINT/SIGTERM.
// The resume decision and the checkpoint cut (marks, the signal's cut, pick-up) are
// src/run/coordinator_cuts.cpp.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "algorithms/algorithm.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/run/coordinator_process.h"
#include "src/run/hosts.h"
#include "src/run/process_checkpoint.h"
#include "src/run/processes.h"
#include "src/run/run_identity.h"
#include "src/run/run_totals.h"
#include "src/run/start_gate.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/components.h"
#include "src/core/island_parts.h"
#include "src/core/json.h"
#include "src/core/params_file.h"
#include "src/core/records.h"
#include "src/core/run_dir.h"
#include "src/core/server_host.h"
#include "src/core/sim_checkpoint.h"
#include "src/core/validate.h"
#include "transport/zmq/coordinator.h"
#include "transport/zmq/curve.h"

namespace atl::run {

namespace {

std::atomic<bool> g_stop{false};
void stop_on_signal(int) { g_stop = true; }

// The running state of a coordinator of this run that did not finish (docs/checkpoints.md
// "Coordinator restart"), when this one is its restart: the run directory holds no
// summary.json, and the state was saved within transport.join_timeout_s (the islands wait
// that long for a coordinator to come back). nullopt otherwise (an old run directory is then
// refused as before). What a restart cannot pick up is refused with one line; why an
// unfinished run directory is not picked up is logged (one warning line).
std::optional<CoordinatorRunState> running_state(const config::Config& config, const std::string& run_path,
                                                 const std::string& hash) {
  namespace fs = std::filesystem;
  const std::string path = coordinator_state_path(config);
  std::error_code ec;
  if (!fs::exists(run_path) || fs::exists(fs::path(run_path) / "summary.json")) return std::nullopt;
  auto not_picked = [&](const std::string& why) {
    ATOLL_WARN("coordinator: not picking up the unfinished run " << run_path << ": " << why);
    return std::nullopt;
  };
  if (!fs::exists(path)) return not_picked("no running state '" + path + "'");
  const auto age = fs::file_time_type::clock::now() - fs::last_write_time(path, ec);
  if (ec || age > std::chrono::duration<double>(config.transport.join_timeout_s))
    return not_picked("its running state was saved more than transport.join_timeout_s ago");
  auto file = checkpoint::read_checkpoint(path);
  StatusOr<CoordinatorRunState> state =
      file.is_ok() ? decode_run_state(file.value(), "'" + path + "'") : StatusOr<CoordinatorRunState>(file.status());
  if (!state.is_ok()) return not_picked(state.status().message());
  if (state->config_hash != hash) return not_picked("its running state is of another config");
  const std::string cannot = "a coordinator restarted mid-run cannot pick up a run ";
  if (config.transport.collective == "star")
    throw UserError(config.source + ": key 'transport.collective': " + cannot +
                    "with the star all-reduce (its collectives in flight live in the coordinator and are not saved)");
  return std::move(state.value());
}

// The records of metrics.jsonl (after a cut), into the summary's totals.
void replay(const std::string& metrics, RunTotals& totals) {
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) totals.add(line);
}

// The supervisor's reports on stdin (--supervised; docs/protocol.md "Supervisor reports"),
// read without blocking from the coordinator's loop: which islands' processes exited.
class SupervisorReports {
 public:
  explicit SupervisorReports(bool enabled) : enabled_(enabled) {
    if (enabled_) ::fcntl(STDIN_FILENO, F_SETFL, ::fcntl(STDIN_FILENO, F_GETFL) | O_NONBLOCK);
  }
  // Reads what has arrived; each whole line that is a report of island 0..islands-1 lands in
  // `exited` (a later report of the same island replaces an earlier one).
  void poll(int islands, std::map<int, std::string>& exited) {
    if (!enabled_) return;
    char buf[1024];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) enabled_ = false;  // the supervisor is gone
        break;
      }
      pending_.append(buf, static_cast<size_t>(n));
      if (pending_.size() > 64 * 1024) pending_.erase(0, pending_.size() - 64 * 1024);
    }
    for (size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
      const std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      const std::optional<ExitReport> r = parse_exit_report(line);
      if (!r || r->island < 0 || r->island >= islands) {
        ATOLL_WARN("coordinator: ignoring a supervisor line that is not a report: '" << line.substr(0, 80) << "'");
        continue;
      }
      exited[r->island] = r->how;
    }
  }

 private:
  bool enabled_;
  std::string pending_;
};

}  // namespace

CoordinatorProcess::CoordinatorProcess(const config::Config& config, const ProcessOptions& options)
    : config_(config),
      options_(options),
      t0_(Clock::now()),
      k_(config.islands.count),
      run_path_((std::filesystem::path(config.run.out_dir) / config.run.name).string()),
      ckpt_hash_(core::resume_hash(config)),
      pickup_hash_(core::resume_hash([c = config]() mutable {
        c.transport.coordinator.clear();
        return c;
      }())),
      ckpts_(coordinator_checkpoint_dir(config), config.checkpoint.keep) {
  core::validate_config(config, core::Target::kCoordinator);
  core::configure_threads(config.run.threads);
  data_ = core::load_run_data(config);
  algo_options_ = core::algorithm_options(config, data_.shard_sizes);
  codec_ = core::make_pipeline(config);
  check_min_islands(config, algorithms::make_server(algo_options_, at::zeros({1}), nullptr) != nullptr);
  resuming_ = config.run.resume && !options.force && std::filesystem::exists(run_path_);
  if (resuming_) {
    resumable_ = usable_coordinator_checkpoints(ckpts_.path(), ckpt_hash_,
                                                [](const std::string& line) { ATOLL_WARN("coordinator: " << line); });
    if (resumable_.empty())
      throw UserError("run.resume: run directory '" + run_path_ + "' exists but '" + ckpts_.path() +
                      "' holds no usable checkpoint of this config; use --force to start the run over");
  }
  if (!resuming_ && !options.force && !options.no_pickup) pickup_ = running_state(config, run_path_, pickup_hash_);
  open_run_dir();
  find_skipped();
  make_server();
}

void CoordinatorProcess::open_run_dir() {
  if (pickup_) {
    // RunDir::Continue removes final_params.bin; an island may have written it already.
    const std::string final_params = run_path_ + "/final_params.bin", kept = run_path_ + "/.final_params.bin.kept";
    std::error_code ec;
    std::filesystem::rename(final_params, kept, ec);
    dir_.emplace(config_, core::RunDir::Continue{pickup_->metrics_bytes});
    if (!ec) std::filesystem::rename(kept, final_params, ec);
    replay(dir_->path() + "/metrics.jsonl", totals_);
    // A checkpoint written after the last save of the running state counts records that
    // were cut (they come again, maybe in another order): it no longer describes this file.
    for (const auto& c : usable_coordinator_checkpoints(ckpts_.path(), ckpt_hash_, nullptr)) {
      if (c.metrics_bytes <= pickup_->metrics_bytes) continue;
      ATOLL_WARN("coordinator: dropping the checkpoint of step " << c.step << " (written after the last saved state)");
      std::filesystem::remove(ckpts_.path() + "/" + checkpoint::CheckpointDir::file_name(c.step));
    }
    ATOLL_WARN("coordinator: picking up the running run " << run_path_ << " (epoch " << pickup_->snapshot.epoch
                                                          << ", " << pickup_->snapshot.members.size() << " islands)");
  } else if (!resuming_) {
    dir_.emplace(config_, options_.force);
    // A fresh start: the coordinator checkpoints of an earlier run here are not this run's.
    for (const auto& e : ckpts_.list()) std::filesystem::remove(e.path);
    std::filesystem::remove(coordinator_state_path(config_));
  }
  // data.normalize: the statistics every island computed the same way, beside config.yaml.
  std::filesystem::create_directories(run_path_);
  std::filesystem::create_directories(ckpts_.path());
  data::write_normalization(data_.splits.normalization, data_.splits.train->input_dim(), run_path_);
}

void CoordinatorProcess::fail_run(const std::string& why) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  if (!run_failure_.empty()) return;
  run_failure_ = why;
  ATOLL_ERROR("coordinator: " << why);
  // The islands stop at their next step instead of training on for a run that has ended
  // (launch, Slurm or a person would otherwise stop them a timeout later).
  if (coordinator_) coordinator_->end_run("the run failed: " + why);
}

std::string CoordinatorProcess::failure() {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return run_failure_;
}

void CoordinatorProcess::sink(const std::string& json) {
  std::lock_guard<std::mutex> lock(dir_mu_);
  if (!dir_) {
    held_.push_back(json);
    return;
  }
  std::string routed;  // the routed eval once every path's record of a step is in
  try {
    if (totals_.add(json, &routed)) dir_->record(json);
    if (!routed.empty() && totals_.add(routed)) dir_->record(routed);
  } catch (const core::OutputError& e) {  // run.metrics_on_failure: stop
    fail_run(e.what());
  }
}

void CoordinatorProcess::make_server() {
  if (algorithms::make_server(algo_options_, at::zeros({1}), nullptr) == nullptr) return;
  auto init = core::make_island_parts(config_, data_, algo_options_, 0);
  evaluator_ = core::make_evaluator(config_, data_);
  auto wall_s = [t0 = t0_] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  core::ServerHost::Hooks hooks;
  hooks.round_time = [](const algorithms::ServerRound&) { return NAN; };  // no virtual clock
  hooks.wall_s = wall_s;
  hooks.record = [this](const std::string& json) { sink(json); };
  hooks.evaluate = [this, wall_s](int64_t step, const at::Tensor& global, double) {
    core::EvalResult r = evaluator_->evaluate(global);
    sink(core::eval_record(-1, step, r, data_.classifier, 0, core::RecordTime{wall_s(), NAN}));
  };
  server_ = core::ServerHost::make(algo_options_, config_.train, data_.splits.train->size(), init.model->params(),
                                   std::move(hooks));
  if (pickup_) {
    // A restart: the server role as it was saved with the last reply it sent; the islands
    // resend what it had not answered (docs/checkpoints.md "Coordinator restart").
    if (!pickup_->has_server)
      throw UserError("coordinator: the running state of " + run_path_ + " holds no server role state; use --force");
    server_->load(pickup_->server, pickup_->server_round);
  } else if (!resuming_) {
    server_->evaluate_start(init.model->params());  // step 0, the initial model (core::ServerHost)
  }
}

transport::CoordinatorOptions CoordinatorProcess::coordinator_options() {
  const auto& t = config_.transport;
  transport::CoordinatorOptions co;
  co.endpoint = t.coordinator;
  co.expected_islands = k_;
  co.run = run_identity(config_);
  co.heartbeat_ms = t.heartbeat_ms;
  co.heartbeat_timeout_ms = t.heartbeat_timeout_ms;
  co.server = server_ ? &server_->server() : nullptr;
  co.pipeline = codec_;
  co.record_sink = [this](const std::string& json) { sink(json); };
  if (resuming_) co.initial_epoch = resumable_.front().epoch;  // epochs go on past the checkpoint's
  if (pickup_) co.restore = pickup_->snapshot;
  // State hand-overs (up to max_store_bytes) are not saved: one in progress at a restart is
  // lost, and its joiner gives up (docs/checkpoints.md "Coordinator restart").
  co.transient_prefixes = {"atoll/handover/"};
  co.persist = [this](const transport::CoordinatorSnapshot& snapshot) { persist(snapshot); };
  co.on_store_set = [this](int island, const std::string& key, std::span<const uint8_t> value) {
    on_store_set(island, key, value);
  };
  co.on_membership = [this](const transport::Membership& view, const std::vector<transport::MemberChange>& changes) {
    on_membership(view, changes);
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
  return co;
}

// The running state, for a restart of this coordinator: saved with metrics.jsonl's length on
// the loop thread, where records are written, so the two agree.
void CoordinatorProcess::persist(const transport::CoordinatorSnapshot& snapshot) {
  CoordinatorRunState st;
  {
    std::lock_guard<std::mutex> lock(dir_mu_);
    if (!dir_) return;  // resuming: not decided yet
    st.metrics_bytes = dir_->metrics_bytes();
  }
  st.config_hash = pickup_hash_;
  st.islands = k_;
  st.snapshot = snapshot;
  if (server_) {  // on the loop thread, which alone calls the server role
    st.has_server = true;
    st.server = server_->server().state();
    st.server_round = server_->round();
    std::lock_guard<std::mutex> lock(marks_mu_);
    latest_server_ = {st.server_round, st.server};  // what a checkpoint cut now holds
  }
  if (Status s = checkpoint::write_checkpoint(coordinator_state_path(config_), encode_run_state(st)); !s.is_ok())
    ATOLL_WARN("coordinator: running state not saved: " << s.to_string());
}

void CoordinatorProcess::on_store_set(int island, const std::string& key, std::span<const uint8_t> value) {
  std::lock_guard<std::mutex> lock(marks_mu_);
  if (key == resume_have_key(island)) {
    have_[island] = parse_steps(std::string(value.begin(), value.end()));
    return;
  }
  if (key == finished_key(island)) {
    finished_.insert(island);
    return;
  }
  if (key == kCheckpointAskKey) {  // a signal asks for a checkpoint: the first ask while none is pending
    const std::vector<int64_t> step = parse_steps(std::string(value.begin(), value.end()));
    if (step.size() == 1 && signal_cut_ == 0 && asked_cut_ == 0) {
      asked_cut_ = step[0];
      asked_by_ = island;
    }
    return;
  }
  if (key == kFinalParamsFailedKey) {
    if (final_params_failure_.empty())
      final_params_failure_ = "island " + std::to_string(island) + ": " + std::string(value.begin(), value.end());
    return;
  }
  // A mark with a value: the island's file of this step was not written, and why. A mark of a
  // cut already done (an island that joined later saying it was behind a signal's cut) is
  // ignored.
  if (const int64_t step = checkpoint_key_step(key); step >= 0 && key == checkpoint_mark_key(step, island))
    gathering_.mark(island, step, std::string(value.begin(), value.end()));
}

// One `membership` record per island whose membership changed (docs/metrics.md). An island
// that joins again after it left or failed is `rejoined`; one beyond islands.count joining for
// the first time is `added` (as the simulator names its events).
void CoordinatorProcess::on_membership(const transport::Membership& view,
                                       const std::vector<transport::MemberChange>& changes) {
  core::MembershipChange m;
  m.epoch = view.epoch;
  for (const transport::Peer& p : view.members) m.members.push_back(p.id);
  for (const transport::MemberChange& c : changes) {
    m.island = c.island;
    m.change = c.change;
    m.reason = c.why;
    if (c.change == "joined") {
      if (seen_.count(c.island)) m.change = "rejoined";
      else if (c.island >= k_) m.change = "added";
      seen_.insert(c.island);
    }
    sink(core::membership_record(m, core::RecordTime{std::chrono::duration<double>(Clock::now() - t0_).count(), NAN}));
  }
}

int CoordinatorProcess::run() {
  const auto& t = config_.transport;
  auto coordinator = transport::Coordinator::start(coordinator_options());
  if (!coordinator.is_ok()) {
    throw UserError("transport.coordinator: cannot start the coordinator at " + t.coordinator + ": " +
                    coordinator.status().message());
  }
  coordinator_ = std::move(coordinator.value());
  if (coordinator_discovered(config_)) {
    publish_coordinator_address(config_);
    ATOLL_INFO("coordinator: islands find it at " << coordinator_address_file(config_));
  }
  std::signal(SIGINT, stop_on_signal);
  std::signal(SIGTERM, stop_on_signal);
  // Slurm's --signal before a time limit reaches every task of a job; the islands checkpoint
  // on it, the coordinator has nothing to do (docs/checkpoints.md "A checkpoint on a signal").
  std::signal(SIGUSR1, SIG_IGN);
  if (!options_.quiet) {
    ATOLL_INFO("coordinator " << coordinator_->endpoint() << ": waiting for " << k_ << " islands; run directory "
                              << run_path_);
  }
  joins_.islands = k_;
  joins_.min_islands = t.min_islands > 0 ? t.min_islands : k_;
  joins_.join_timeout_s = t.join_timeout_s;
  join_deadline_ =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t.join_timeout_s));
  if (pickup_) take_pickup();
  watch();
  coordinator_->stop();
  if (coordinator_discovered(config_)) withdraw_coordinator_address(config_);
  return finish();
}

void CoordinatorProcess::announce(const StartDecision& d) {
  coordinator_->store_set(kRunStartKey, encode_start(d));
  if (!d.start) {
    ATOLL_ERROR("coordinator: the run cannot start: " << d.why);
    failed_at_ = Clock::now();
  } else if (!d.why.empty()) {
    ATOLL_WARN("coordinator: " << d.why);
  }
}

void CoordinatorProcess::watch() {
  SupervisorReports reports(options_.supervised);
  transport::Coordinator& coord = *coordinator_;
  auto view = coord.membership();
  std::optional<Clock::time_point> ended_at;
  while (!g_stop) {
    view = coord.wait_for_change(view.epoch,
                                 Clock::now() + std::chrono::milliseconds(config_.checkpoint.every > 0 ? 20 : 200));
    if (!failure().empty()) {
      // The run failed and its islands were told (fail_run): wait for them to leave (their
      // last records come first), a heartbeat timeout at most.
      if (!ended_at) ended_at = Clock::now();
      if (view.members.empty() ||
          Clock::now() - *ended_at > std::chrono::milliseconds(config_.transport.heartbeat_timeout_ms))
        break;
      continue;
    }
    for (const auto& p : view.members) ever_joined_.insert(p.id);
    reports.poll(k_, exited_);
    if (!decision_) decide(view);
    if (awaiting_resume_) decide_resume();
    if (dir_ && config_.checkpoint.every > 0) {
      announce_signal_cut();
      cut_checkpoints(view);
    }
    if (decision_ && decision_->start && view.members.empty()) break;
    // A failed start: the islands hear of it when they join (an early failure may come while
    // some are still starting) and leave; stop once every island not refused has joined and
    // left, or 10 s after the decision (30 s at most for islands that do not leave).
    if (failed_at_) {
      bool all_heard = true;
      for (int id = 0; id < k_; ++id)
        all_heard = all_heard && (joins_.refused.count(id) || joins_.gone.count(id) || ever_joined_.count(id));
      const auto since = Clock::now() - *failed_at_;
      if ((view.members.empty() && (all_heard || since > std::chrono::seconds(10))) || since > std::chrono::seconds(30))
        break;
    }
  }
}

// The start decision (src/run/start_gate.h) on the membership `view`.
void CoordinatorProcess::decide(const transport::Membership& view) {
  const auto& t = config_.transport;
  joins_.joined.clear();
  for (const auto& p : view.members) joins_.joined.push_back(p.id);
  joins_.left.clear();
  for (int id : ever_joined_) {
    if (std::find(joins_.joined.begin(), joins_.joined.end(), id) == joins_.joined.end()) joins_.left.insert(id);
  }
  if (t.curve) {
    const auto keys = coordinator_->refused_keys();
    if (keys.size() != refused_seen_) {
      refused_seen_ = keys.size();
      joins_.refused = refused_islands(t.keys_dir, k_, keys);
    }
  }
  // An island whose process exited before it ever joined is not coming (one that joined and
  // died is the failure detector's, as before).
  for (const auto& [id, how] : exited_) {
    if (ever_joined_.count(id) || joins_.gone.count(id)) continue;
    joins_.gone[id] = how;
    ATOLL_WARN("coordinator: island " << id << "'s process ended with " << how << " before it joined");
  }
  joins_.timed_out = Clock::now() >= join_deadline_;
  decision_ = decide_start(joins_);
  // A failure made certain by refused or gone islands waits for the islands still starting
  // (a heartbeat timeout at most), so that its line names only the islands that cannot come
  // or are truly absent.
  if (decision_ && !decision_->start && !joins_.timed_out && !still_expected(joins_).empty()) {
    if (!certain_since_) certain_since_ = Clock::now();
    if (Clock::now() - *certain_since_ < std::chrono::milliseconds(t.heartbeat_timeout_ms)) decision_.reset();
  }
  if (!decision_) return;
  if (resuming_ && decision_->start) {
    awaiting_resume_ = decision_;
  } else {
    if (config_.run.resume) coordinator_->store_set(kResumeKey, {'f', 'r', 'e', 's', 'h'});
    announce(*decision_);
  }
}

int CoordinatorProcess::finish() {
  // The server's final model is evaluated even when churn kept the last round from being the
  // planned one (core::ServerHost::evaluate_final; a step already evaluated is not again).
  int64_t final_step = -1;  // the step whose eval is the run's final one
  if (server_ && server_->global().defined()) {
    final_step = server_->final_step();
    if (!totals_.evaluated(final_step)) server_->evaluate_final();
  }
  // How the run ended (docs/errors.md "Outputs"): the first reason it failed, if any.
  std::string error = failure();
  if (error.empty() && decision_ && !decision_->start) error = "it could not start: " + decision_->why;
  if (error.empty() && g_stop) error = "stopped by a signal before the run finished";
  if (error.empty() && totals_.finished() == 0) error = "no island finished the run";
  // The lead islands write the final parameters (core::IslandRuntime::write_final_outputs);
  // one that could not says so before it fails.
  if (error.empty() && !final_params_failure_.empty()) error = final_params_failure_;
  // The outputs in an order that never claims success falsely: the server's final model,
  // then summary.json last, whose "status" says how the run ended.
  if (server_ && server_->global().defined() && error.empty()) {
    try {
      core::write_params(run_path_ + "/final_params.bin", server_->global());
    } catch (const core::OutputError& e) {
      error = e.what();
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0_).count();
  core::JsonObject s;
  s.add("algorithm", config_.algorithm.name)
      .add("islands", k_)
      .add("model", config_.model.name)
      .add("mode", "processes")
      .add("compression", codec_.describe());
  totals_.add_summary(s, final_step, data_.classifier);
  s.add("wall_time_s", wall);
  core::RunOutcome outcome;
  outcome.status = error.empty() ? "finished" : "failed";
  outcome.error = error;
  outcome.checkpoints = config_.checkpoint.every > 0;
  {
    std::lock_guard<std::mutex> lock(marks_mu_);
    outcome.checkpoints_asked = checkpoints_asked_;
    outcome.checkpoints_written = checkpoints_written_;
  }
  {
    std::lock_guard<std::mutex> lock(dir_mu_);
    if (dir_) {
      outcome.records_lost = dir_->records_lost();
      outcome.records_failure = dir_->first_failure();
      add_outcome(s, outcome);
      // A resume that never started leaves the run directory as it was.
      try {
        dir_->write_summary(s.str());
      } catch (const core::OutputError& e) {
        if (error.empty()) error = e.what();
        ATOLL_ERROR("coordinator: " << e.what());
      }
    }
  }
  if (!error.empty()) {
    ATOLL_ERROR("coordinator: the run failed: " << error);
    return 1;
  }
  if (!options_.quiet)
    ATOLL_INFO("coordinator: the run finished (" << totals_.finished() << " of " << k_ << " islands)"
                                                 << core::outcome_note(outcome));
  // A run that lost islands but finished with the survivors succeeded (summary says how many).
  return 0;
}

int run_coordinator(const config::Config& config, const ProcessOptions& options) {
  return CoordinatorProcess(config, options).run();
}

int keygen(const std::string& dir, const std::string& name) {
  auto keys = transport::curve::generate_keypair(dir, name);
  if (!keys.is_ok()) throw UserError("keygen: " + keys.status().message());
  std::printf("%s/%s.pub: %s\n", dir.c_str(), name.c_str(), keys.value().public_key.c_str());
  return 0;
}

}  // namespace atl::run
