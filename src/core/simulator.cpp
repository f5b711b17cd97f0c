// atoll simulate (docs/simulator.md): one function whose lambdas (membership events,
// hand-overs, the server role) share the run's state on the virtual clock. The checkpoint
// gathering is a class of its own (checkpoint_gathering.h); the membership events are the
// next part to move into one, owning its part of that state.
#include "src/core/simulator.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <mutex>
#include <thread>
#include <utility>

#include "algorithms/algorithm.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/data/dataset.h"
#include "src/models/model.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/components.h"
#include "src/core/cost_model.h"
#include "src/core/network_profile.h"
#include "src/core/eval_summary.h"
#include "src/core/evaluator.h"
#include "src/core/handover.h"
#include "src/core/island_parts.h"
#include "src/core/island_runtime.h"
#include "src/core/json.h"
#include "src/core/params_file.h"
#include "src/core/progress.h"
#include "src/core/roles.h"
#include "src/core/run_dir.h"
#include "src/core/server_host.h"
#include "src/core/sim_checkpoint.h"
#include "src/core/validate.h"
#include "src/train/inner_optimizer.h"
#include "transport/inproc/inproc_group.h"
#include "transport/inproc/scheduler.h"

namespace atl::core {

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
  std::unique_ptr<IslandRuntime> runtime;  // context, loop, records (src/core/island_runtime.h)
  bool planned = false;  // its planned steps are in the progress total
  int64_t rounds = 0;
  double compute_s = 0;  // virtual seconds spent computing inner steps
  bool alive = true;      // a member (not killed, not waiting to be added)
  bool finished = false;  // ran all its steps
  // At the previous round record: to report per-round compute / comm / idle.
  double last_compute_s = 0, last_comm_s = 0, last_waited_s = 0, last_slept_s = 0;
};

// Peak resident memory of this process (VmHWM), in MiB; NaN where /proc is unavailable.
double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "  123 kB"
  }
  return NAN;
}

// Thrown by an island whose training loss is not finite; stops the whole simulation.
struct Diverged : std::runtime_error {
  Diverged(int island, int64_t step, double loss)
      : std::runtime_error("island " + std::to_string(island) + ": training loss is " +
                           std::to_string(loss) + " at step " + std::to_string(step)),
        island(island), step(step) {}
  int island;
  int64_t step;
};

// Thrown inside a killed island's thread to unwind its loop.
struct IslandKilled {};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The newest usable checkpoint of an existing run directory, for run.resume
// (docs/checkpoints.md "Resuming"). Each newer checkpoint that does not read back whole is
// reported with one warning line and skipped. A UserError when there is none, or when it
// belongs to another config.
SimCheckpoint load_resume_point(const config::Config& config, const std::string& run_path,
                                const std::string& ckpt_path, int islands) {
  checkpoint::CheckpointDir ckpts(ckpt_path, config.checkpoint.keep);
  StatusOr<checkpoint::Loaded> loaded =
      ckpts.load_latest([](const std::string& line) { ATOLL_WARN(line); });
  if (!loaded.is_ok())
    throw UserError("run.resume: run directory '" + run_path + "' exists but '" + ckpt_path +
                    "' holds no usable checkpoint; use --force to start the run over");
  const std::string what = "checkpoint '" + loaded->path + "'";
  StatusOr<SimCheckpoint> c = decode_sim_checkpoint(loaded->checkpoint, what);
  if (!c.is_ok()) throw UserError("run.resume: " + c.status().message());
  if (c->config_hash != resume_hash(config))
    throw UserError("run.resume: " + what + " was written by a run with another config (only run.resume and "
                    "checkpoint.keep/dir may differ); use --force to start the run over");
  if (static_cast<int>(c->islands.size()) != islands)
    throw UserError("run.resume: " + what + " holds " + std::to_string(c->islands.size()) + " islands, this run " +
                    std::to_string(islands));
  return std::move(*c);
}

}  // namespace

RunSummary simulate(const config::Config& config, const SimulateOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  validate_config(config, Target::kSimulate);
  const int threads = configure_threads(config.run.threads);
  const int k = config.islands.count;
  int added = 0;  // islands that `add` events bring in later: ids k..n-1
  for (const auto& e : config.islands.events) added += e.add;
  const int n = k + added;
  const uint64_t seed = config.run.seed;
  const c10::Device device(config.run.device);
  torch::manual_seed(seed);

  // --- resume (docs/checkpoints.md "Resuming"): a run directory that exists continues from
  // its newest usable checkpoint; none there yet: a fresh start.
  const std::string run_path = (std::filesystem::path(config.run.out_dir) / config.run.name).string();
  const std::string ckpt_path = config.checkpoint.dir.empty()
                                    ? (std::filesystem::path(run_path) / "checkpoints").string()
                                    : config.checkpoint.dir;
  std::optional<SimCheckpoint> resumed;
  if (config.run.resume && !options.force && std::filesystem::exists(run_path))
    resumed = load_resume_point(config, run_path, ckpt_path, n);

  // --- data, models, algorithm (everything that can fail on user input, before the run dir)
  config::Config data_config = config;  // shards for every island, including added ones
  data_config.islands.count = n;
  RunData run_data = load_run_data(data_config);
  const data::Splits& splits = run_data.splits;
  const bool classifier = run_data.classifier;
  const auto algo_options = algorithm_options(config, run_data.shard_sizes);
  const compression::Pipeline codec = make_pipeline(config);
  // The scheduler and the hub outlive the islands, whose algorithms may hold handles into it.
  transport::Scheduler scheduler(n);
  transport::InprocHub hub(n, scheduler);
  std::vector<Island> islands(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) islands[i].parts = make_island_parts(config, run_data, algo_options, i);
  auto evaluator = make_evaluator(config, run_data);
  const int64_t n_params = islands[0].parts.model->numel();

  // --- virtual clock: compute and network models
  const transport::NetworkModel network = make_network_model(config);
  const double examples_per_step = static_cast<double>(config.train.batch_size) * config.train.grad_accum *
                                   (classifier ? 1.0 : static_cast<double>(config.model.seq_len));
  CostModel cost(config.compute, islands[0].parts.model->flops_per_example() * examples_per_step, n, seed);

  std::optional<RunDir> run_dir;
  if (resumed) run_dir.emplace(config, RunDir::Continue{resumed->metrics_bytes});
  else run_dir.emplace(config, options.force);
  RunDir& dir = *run_dir;
  checkpoint::CheckpointDir checkpoints(ckpt_path, config.checkpoint.keep);
  if (!resumed) {  // a fresh start: checkpoints of an earlier run here are not this run's
    for (const auto& e : checkpoints.list()) std::filesystem::remove(e.path);
  }
  data::write_normalization(splits.normalization, splits.train->input_dim(), dir.path());  // data.normalize
  Progress progress(options.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);
  progress.message("atoll simulate: " + config.run.name + ": " + config.algorithm.name + ", " +
                   std::to_string(k) + (k == 1 ? " island, " : " islands, ") + config.model.name + " " +
                   std::to_string(n_params) + " params, " + splits.train->describe() + ", " +
                   std::to_string(threads) + " threads -> " + dir.path() +
                   (resumed ? " (resumed after step " + std::to_string(resumed->step) + ")" : ""));

  if (!resumed) dir.record(JsonObject()
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
  EvalSummary evals;  // the run's eval records
  double target_time = NAN, target_bytes = NAN;
  int64_t target_step = -1;
  auto total_bytes = [&] {
    uint64_t b = 0;
    for (auto& is : islands) if (is.group) b += is.group->bytes().sent;
    return b;
  };
  // After each eval record (an island's, or the server role's).
  auto after_eval = [&](int64_t step, const EvalResult& path_or_eval, double sim_time) {
    EvalResult r = path_or_eval;
    if (r.path >= 0) {  // DiPaCo: one path's record; the routed eval once every path's is in
      std::optional<EvalResult> routed = evals.add_path(step, r);
      if (!routed) return;
      r = *routed;
      dir.record(eval_record(-1, step, r, classifier, total_bytes(), RecordTime{seconds_since(t0), sim_time}));
    }
    evals.add(step, r.loss, r.accuracy);
    state.val_loss = r.loss;
    if (config.train.target_loss > 0 && target_step < 0 && r.loss <= config.train.target_loss) {
      target_step = step;
      target_time = sim_time;
      target_bytes = static_cast<double>(total_bytes());
    }
  };
  // The server role's global model (islands evaluate theirs through their runtime).
  auto server_evaluate = [&](int64_t step, const at::Tensor& params, double sim_time) {
    if (evals.evaluated(step)) return;
    EvalResult r = evaluator->evaluate(params);
    dir.record(eval_record(-1, step, r, classifier, total_bytes(), RecordTime{seconds_since(t0), sim_time}));
    after_eval(step, r, sim_time);
  };

  // Survivors notice a dead island after the heartbeat timeout, as in real runs.
  hub.set_network(&network, seed, static_cast<double>(config.transport.heartbeat_timeout_ms) / 1e3);
  hub.set_star(config.transport.collective == "star");  // all-reduce through the server, as real runs do

  // Server role (fedavg, async_local_sgd, src/core/server_host.h) on the virtual clock.
  std::unique_ptr<ServerHost> server;
  ServerHost::Hooks server_hooks;
  // fedavg knows when the round closed (a deadline, a loss noticed); otherwise the pusher,
  // which runs the server, holds the time.
  server_hooks.round_time = [&](const algorithms::ServerRound& r) {
    return std::isnan(r.at_s) ? scheduler.time(scheduler.current()) : r.at_s;
  };
  server_hooks.wall_s = [t0] { return seconds_since(t0); };
  server_hooks.record = [&dir](const std::string& json) { dir.record(json); };
  server_hooks.evaluate = server_evaluate;
  server_hooks.after_round = [&](const algorithms::ServerRound& r) {
    if (server->counts_rounds()) state.rounds = std::max(state.rounds, r.round);
  };
  server = ServerHost::make(algo_options, config.train, splits.train->size(), islands[0].parts.model->params(),
                            std::move(server_hooks));
  hub.set_server(server ? &server->server() : nullptr);
  if (resumed) hub.restore(resumed->hub);  // before the groups, which read their sequence numbers

  for (int i = 0; i < n; ++i) {
    islands[i].group = hub.make_group(i);
    islands[i].time = std::make_unique<VirtualTime>(scheduler, i);
  }

  const auto& train = config.train;
  // Membership events of each island (islands.events): kills, and the times it (re)joins.
  struct Kill {
    config::IslandEvent event;
    int64_t index = 0;  // in islands.events
    bool fired = false;
  };
  std::vector<std::vector<Kill>> kills(static_cast<size_t>(n));
  std::vector<std::vector<double>> joins(static_cast<size_t>(n));
  int next_added = k;
  for (size_t ei = 0; ei < config.islands.events.size(); ++ei) {
    const auto& e = config.islands.events[ei];
    if (e.kill >= 0) kills[static_cast<size_t>(e.kill)].push_back({e, static_cast<int64_t>(ei)});
    if (e.rejoin >= 0) joins[static_cast<size_t>(e.rejoin)].push_back(e.at_time_s);
    for (int a = 0; a < e.add; ++a) joins[static_cast<size_t>(next_added++)].push_back(e.at_time_s);
  }
  for (auto& j : joins) std::sort(j.begin(), j.end());
  const bool joins_planned = std::any_of(joins.begin(), joins.end(), [](auto& j) { return !j.empty(); });
  std::vector<double> member_since(static_cast<size_t>(n), 0.0), member_s(static_cast<size_t>(n), 0.0);
  std::vector<double> end_time(static_cast<size_t>(n), 0.0);  // when each island last left or finished
  for (int j = k; j < n; ++j) {
    islands[j].alive = false;
    if (!resumed) hub.remove_member(j, 0, /*failure=*/false);  // a restored hub has its members
  }
  auto membership = [&](int i, const char* change, const char* why) {
    const transport::MembershipView view = islands[i].group->view();
    dir.record(membership_record(MembershipChange{i, change, why, islands[i].runtime->steps(), view.epoch, view.members},
                                 RecordTime{seconds_since(t0), scheduler.time(i)}));
  };
  // A death may complete the gathering of a checkpoint that waited only for this island
  // (made with the checkpoints below).
  std::optional<CheckpointGathering> gathering;
  auto die = [&](int i, Kill& kill, const char* why) {
    Island& is = islands[i];
    kill.fired = true;
    scheduler.yield(i);  // islands earlier on the clock act before the death
    is.alive = false;
    hub.remove_member(i, scheduler.time(i));
    member_s[i] += scheduler.time(i) - member_since[i];
    end_time[i] = scheduler.time(i);
    membership(i, "killed", why);
    gathering->left(i, /*done=*/false);
    throw IslandKilled{};
  };
  // Who evaluates and who hands state over (src/core/roles.h), on the simulator's view of
  // the running islands: alive and unfinished.
  const Roles roles(config);
  auto running = [&] {
    std::vector<int> r;
    for (int j = 0; j < n; ++j)
      if (islands[j].alive && !islands[j].finished) r.push_back(j);
    return r;
  };
  // The lowest running island (its global model is the checkpoint's); -1: none.
  auto evaluator_island = [&] {
    for (int j = 0; j < n; ++j)
      if (islands[j].alive && !islands[j].finished) return j;
    return -1;
  };
  auto lead_for_evals = [&](int i) { return islands[i].alive && roles.leads(i, running()); };
  // A joiner waits at its join time for its donor's next step boundary (src/core/handover.h);
  // the hub carries the hand-over (its bytes on the donor's link) and makes the joiner a
  // member from the donor's next collective on.
  struct Arriving {
    bool ready = false;
    double arrival = 0;  // when the hand-over has crossed the link
    Handover handover;
  };
  std::vector<int> pending;  // joiners waiting for a hand-over
  std::vector<Arriving> handovers(static_cast<size_t>(n));
  // Joiners between their join time and their first step as members (waiting for a
  // hand-over, or for its arrival): their state is no checkpoint's.
  std::vector<char> joining(static_cast<size_t>(n), 0);
  // Island `donor` at the boundary after `step` serves the pending joiners whose donor it is
  // among `live`.
  auto hand_over = [&](int donor, int64_t step, const std::vector<int>& live) {
    std::erase_if(pending, [&](int j) {
      if (roles.donor(j, live) != donor) return false;
      Arriving& a = handovers[j];
      a.handover = export_handover(donor, *islands[donor].parts.algorithm, step, hub.next_seq(donor));
      a.arrival = hub.hand_over(donor, j, handover_bytes(a.handover), scheduler.time(donor));
      hub.add_member(j, a.handover.first_seq);
      a.ready = true;
      return true;
    });
  };

  // Checkpoints (src/core/checkpoint_gathering.h): an island's state is read at the write,
  // not at its arrival: a collective it posted may complete only when a later island posts
  // (diloco with overlap: the average lands in its buffer then). Dead islands are saved as
  // dead (their clock, which kills fired).
  auto island_state = [&](int i) {
    Island& is = islands[i];
    IslandCheckpoint c;
    if (is.alive) {
      static_cast<IslandTraining&>(c) = capture_training(is.parts, *is.runtime);
    } else {  // a dead island keeps only its accounting and data position (a rejoin reads on)
      c.sampler = is.parts.sampler->position();
      c.runtime = is.runtime->saved();
    }
    c.time_s = scheduler.time(i);
    c.compute_s = is.compute_s;
    c.slept_s = is.time->slept_s;
    c.last_compute_s = is.last_compute_s;
    c.last_comm_s = is.last_comm_s;
    c.last_waited_s = is.last_waited_s;
    c.last_slept_s = is.last_slept_s;
    c.member_since_s = member_since[i];
    c.member_s = member_s[i];
    c.end_time_s = end_time[i];
    c.rounds = is.rounds;
    c.planned = is.planned;
    c.alive = is.alive;
    c.finished = is.finished;
    return c;
  };
  // What checkpoint.every asked for and what was written (summary.json, the end line).
  int64_t checkpoints_asked = 0, checkpoints_written = 0;
  const bool stop_on_checkpoint_failure = config.checkpoint.on_failure == "stop";
  auto write_checkpoint = [&](int64_t step) {
    SimCheckpoint c;
    c.step = step;
    c.metrics_bytes = dir.metrics_bytes();
    c.config_hash = resume_hash(config);
    c.global = server && server->global().defined() ? server->global()
                                                    : islands[evaluator_island()].parts.algorithm->global_params();
    if (server) {  // the server role (fedavg): cut between its rounds
      c.has_server = true;
      c.server = server->save();
      c.server_time = server->time();
      c.server_round = server->round();
    }
    c.hub = hub.snapshot();
    c.cost_model = cost.save();
    c.progress = state;
    c.evals = evals.saved();
    c.target_time = target_time;
    c.target_bytes = target_bytes;
    c.target_step = target_step;
    c.torch_rng = at::detail::getDefaultCPUGenerator().get_state();
    c.islands.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) c.islands[static_cast<size_t>(i)] = island_state(i);
    for (int i = 0; i < n; ++i)
      for (const Kill& kill : kills[static_cast<size_t>(i)])
        if (kill.fired) c.kills_fired.push_back(kill.index);
    std::sort(c.kills_fired.begin(), c.kills_fired.end());
    // A checkpoint that cannot be written costs only the ability to resume from it.
    const auto started = std::chrono::steady_clock::now();
    const std::vector<checkpoint::Section> sections = encode_sim_checkpoint(c);
    size_t bytes = 0;
    for (const auto& sec : sections) bytes += sec.data.size();
    ++checkpoints_asked;
    if (Status st = checkpoints.save(step, sections); !st.is_ok()) {
      const std::string what = "checkpoint of step " + std::to_string(step) + " not written: " + st.to_string();
      if (stop_on_checkpoint_failure) throw OutputError(what + " (checkpoint.on_failure: stop)");
      ATOLL_WARN(what);
    } else {
      ++checkpoints_written;
      ATOLL_DEBUG("checkpoint of step " << step << ": " << bytes / 1e6 << " MB in " << seconds_since(started) << " s");
    }
  };
  CheckpointGathering::Hooks gather;
  gather.alive = [&](int j) { return islands[j].alive; };
  gather.joining = [&](int j) { return joining[j] != 0; };
  // async_local_sgd: a push posted before the cut's time that reached the server after it.
  const bool cut_in_time = islands[0].parts.algorithm->checkpoint_cut() == algorithms::CheckpointCut::kServerTime;
  gather.skip = [&](int64_t cut) -> std::string {
    return cut_in_time && hub.last_push_arrival() >= gathering->cut_time_s(cut) ? "a push in flight" : "";
  };
  gather.write = write_checkpoint;
  gather.block = [&](int i, const std::function<bool()>& ready, const std::string& what) {
    scheduler.block_until(i, ready, what);
  };
  gather.yield = [&](int i) { scheduler.yield(i); };
  gathering.emplace(n, config.checkpoint.every, resumed ? resumed->step : 0,
                    cost.base_step_s() / *std::max_element(cost.speeds().begin(), cost.speeds().end()),
                    std::move(gather));
  auto maybe_checkpoint = [&](int i, int64_t step, int64_t total) {
    gathering->at_boundary(i, *islands[i].parts.algorithm, step, total);
  };

  // Each island's runtime: the simulator supplies the virtual clock, the in-process group,
  // the run directory as record sink, the exact membership (the lead is the lowest live
  // island), and at step boundaries the cost model, kills, scheduling and hand-overs.
  for (int i = 0; i < n; ++i) {
    Island& is = islands[i];
    IslandHost host;
    host.time = is.time.get();
    host.virtual_clock = true;
    host.wall_s = [t0] { return seconds_since(t0); };
    host.record = [&dir](const std::string& json) { dir.record(json); };
    // The lowest live island evaluates the global model for algorithms that keep it on the
    // islands (while running: evaluator_island(); once finished, it evaluates steps it kept
    // only when no lower island is still running).
    host.is_lead = [&, i] { return lead_for_evals(i); };
    host.eval_recorded = [&, i](int64_t step) { return evals.evaluated(step, islands[i].parts.eval_path); };
    host.after_eval = [&, i](int64_t step, const EvalResult& r) { after_eval(step, r, scheduler.time(i)); };
    // A finished island with kept steps waits for the lead to record them or to die.
    host.wait = [&, i](double) {
      const size_t recorded = evals.count();
      scheduler.block_until(
          i, [&, i, recorded] { return evals.count() != recorded || lead_for_evals(i); },
          "eval steps kept for a slower lead");
    };
    host.eval_patience_s = INFINITY;  // the lead is known exactly: no timeout
    host.eval_settle_every_s = 0;     // recorded() is a set lookup
    host.eval_bytes = total_bytes;
    host.after_round = [&, i](const algorithms::RoundInfo& r) {
      islands[i].rounds = r.round;
      state.rounds = std::max(state.rounds, r.round);
    };
    host.round_times = [&, i] {
      Island& me = islands[i];
      const auto waits = hub.wait_time(i);
      RoundTimes t;
      t.compute_s = me.compute_s - me.last_compute_s;
      t.comm_s = waits.comm_s - me.last_comm_s;
      const double waited = waits.idle_s - me.last_waited_s;    // blocked on the others
      const double slept = me.time->slept_s - me.last_slept_s;  // chosen by the algorithm
      t.idle_s = waited + slept;
      t.sync_s = t.comm_s + waited;  // as real runs measure it
      me.last_compute_s = me.compute_s;
      me.last_comm_s = waits.comm_s;
      me.last_waited_s = waits.idle_s;
      me.last_slept_s = me.time->slept_s;
      return t;
    };
    host.after_compute = [&, i](int64_t) {
      const double dt = cost.next_step_s(i);
      islands[i].compute_s += dt;
      scheduler.advance(i, scheduler.time(i) + dt);
      for (auto& kill : kills[static_cast<size_t>(i)])
        if (!kill.fired && kill.event.at_time_s >= 0 && scheduler.time(i) >= kill.event.at_time_s)
          die(i, kill, "at_time_s");
    };
    host.before_records = [&, i](int64_t step, int64_t total, double loss) {
      if (!std::isfinite(loss)) throw Diverged(i, step, loss);
      if (!islands[i].planned) {
        state.steps_total += total - train.steps;
        islands[i].planned = true;
      }
    };
    host.after_step = [&, i](int64_t step, int64_t total, double loss, double) {
      Island& me = islands[i];
      ++state.steps_done;
      state.last_loss = loss;
      state.bytes = total_bytes();
      progress.update(state);
      // Joiners wait for this step boundary; those earlier on the clock must have asked.
      if (joins_planned) scheduler.yield(i);
      if (!pending.empty() && me.parts.algorithm->can_hand_over()) hand_over(i, step, running());
      for (auto& kill : kills[static_cast<size_t>(i)])
        if (!kill.fired && kill.event.at_step == step) die(i, kill, "at_step");
      maybe_checkpoint(i, step, total);
    };
    // A client of fedavg whose first pull (after a resume: its next) is at or past a cut
    // arrives there before it.
    host.after_setup = [&, i](int64_t step) {
      if (islands[i].parts.algorithm->checkpoint_cut() != algorithms::CheckpointCut::kStep)
        maybe_checkpoint(i, step, std::numeric_limits<int64_t>::max());
    };
    is.runtime = std::make_unique<IslandRuntime>(i, is.parts, train, is.group.get(), &codec, run_data.shard_sizes[i],
                                                 evaluator.get(), classifier, std::move(host));
    // async_local_sgd: a cut may also fall between two server calls of one boundary.
    is.runtime->context().before_server_call = [&, i] {
      maybe_checkpoint(i, islands[i].runtime->steps(), std::numeric_limits<int64_t>::max());
    };
    is.runtime->context().speed = cost.speeds()[static_cast<size_t>(i)];
  }

  if (resumed) {
    // Every island, the shared accounting and the RNGs as they were at the checkpoint.
    for (int i = 0; i < n; ++i) {
      const IslandCheckpoint& c = resumed->islands[static_cast<size_t>(i)];
      Island& is = islands[i];
      if (c.alive) {
        restore_training(is.parts, *is.runtime, c);
      } else {
        // Dead (or not added yet): its steps so far; a rejoin starts from a hand-over.
        is.runtime->resume(c.runtime, std::nullopt);
        if (!is.parts.use_path) is.parts.sampler->seek(c.sampler);
      }
      scheduler.set_time(i, c.time_s);
      is.compute_s = c.compute_s;
      is.time->slept_s = c.slept_s;
      is.last_compute_s = c.last_compute_s;
      is.last_comm_s = c.last_comm_s;
      is.last_waited_s = c.last_waited_s;
      is.last_slept_s = c.last_slept_s;
      member_since[i] = c.member_since_s;
      member_s[i] = c.member_s;
      end_time[i] = c.end_time_s;
      is.rounds = c.rounds;
      is.planned = c.planned;
      is.alive = c.alive;
      is.finished = c.finished;
      if (is.finished) gathering->finished_before(i);  // a checkpoint waits for it no more
    }
    for (auto& of_island : kills)
      for (Kill& kill : of_island)
        kill.fired = std::binary_search(resumed->kills_fired.begin(), resumed->kills_fired.end(), kill.index);
    cost.load(resumed->cost_model);
    if (resumed->has_server && server) {
      server->load(resumed->server, resumed->server_round, resumed->server_time);
    }
    state = resumed->progress;
    evals.restore(resumed->evals);
    target_time = resumed->target_time;
    target_bytes = resumed->target_bytes;
    target_step = resumed->target_step;
    if (resumed->torch_rng.defined()) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default's state
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(resumed->torch_rng);
    }
  } else if (islands[0].parts.algorithm->global_on_server()) {
    // Step 0: the initial model (the server role's, or island 0's as the lead).
    server->evaluate_start(islands[0].parts.model->params());
  } else {
    // Island 0 evaluates the initial model; DiPaCo: the first island of every path, its path's.
    std::set<int> started;
    for (int i = 0; i < n; ++i)
      if (started.insert(islands[i].parts.eval_path).second) islands[i].runtime->evaluate_start();
  }

  RunSummary summary;
  try {
    scheduler.run([&](int i) {
      at::init_num_threads();
      Island& is = islands[i];
      if (is.finished) return;  // resumed: it had finished before the checkpoint
      size_t next_join = 0;
      for (bool member = is.alive;;) {
        if (member) {
          try {
            is.runtime->run();
            scheduler.yield(i);  // finish() may have moved the clock
            member_s[i] += scheduler.time(i) - member_since[i];
            end_time[i] = scheduler.time(i);
            const std::vector<int> live = running();  // with this island, for its joiners
            is.finished = true;
            // As in real runs: each island's final global model, by hash (equal on islands
            // that agree bitwise, e.g. after an exact state hand-over).
            is.runtime->finish();
            // Joiners still waiting get the final state (they have no steps left to run).
            if (!pending.empty()) hand_over(i, is.runtime->steps(), live);
            // A checkpoint gathered while this island ran its last steps waits for it no more.
            gathering->left(i, /*done=*/true);
            return;
          } catch (const IslandKilled&) {
            // Unwound; its collectives completed without it. Drop the algorithm now: it may
            // hold handles into the hub.
            is.parts.algorithm.reset();
          }
        }
        // Dead (or not yet added): come (back) at the next join time after now, if any.
        while (next_join < joins[i].size() && joins[i][next_join] < scheduler.time(i)) ++next_join;
        if (next_join >= joins[i].size()) return;
        VirtualTime waiting(scheduler, i);
        waiting.sleep_until_s(joins[i][next_join++]);
        scheduler.yield(i);  // the others' state at the join time
        if (roles.donor(i, running()) < 0) return;  // nobody left to hand the state over
        handovers[i] = {};
        pending.push_back(i);
        joining[i] = 1;
        scheduler.block_until(
            i, [&] { return handovers[i].ready || roles.donor(i, running()) < 0; }, "state hand-over");
        if (!handovers[i].ready) {  // every donor finished or died meanwhile
          pending.erase(std::remove(pending.begin(), pending.end(), i), pending.end());
          joining[i] = 0;
          return;
        }
        Arriving& a = handovers[i];
        // Fresh inner optimizer and algorithm on the global model, then the donor's state
        // (the runtime imports it after setup and goes on after the donor's step).
        is.parts.optimizer = train::make_inner_optimizer(config.train);
        is.parts.algorithm = algorithms::make_algorithm(algo_options, i);
        is.group = hub.make_group(i);
        is.time->sleep_until_s(a.arrival);
        scheduler.yield(i);  // others earlier on the clock do not see it yet
        is.alive = true;
        joining[i] = 0;
        member_since[i] = scheduler.time(i);
        gathering->joined_after(i, a.handover.step);  // due at the next multiple after the donor's step
        a.handover.epoch = is.group->view().epoch;
        is.runtime->join(std::move(a.handover), is.group.get());
        membership(i, i < k ? "rejoined" : "added", "event");
        member = true;
      }
    });
  } catch (const Diverged& d) {
    // Reported, not hidden: the record, the summary's flag and an error from simulate().
    summary.diverged = true;
    summary.diverged_island = d.island;
    summary.diverged_step = d.step;
    dir.record(JsonObject().add("event", "diverged").add("island", d.island).add("step", d.step).str());
  }

  // The server's final model is evaluated even when churn kept the last round from being
  // the planned one (evaluate() skips a step it has already done).
  if (server) server->evaluate_final();

  // The final eval is the one at the step the run ended on: the server's last round, or the
  // last step of the islands that finished. Anything else (every island died or diverged)
  // leaves final_val_loss null and says where the last eval was.
  const bool server_model = server && server->global().defined();
  int64_t final_step = server_model ? server->final_step() : -1;
  for (const Island& is : islands)
    if (!server_model && is.finished) final_step = std::max(final_step, is.runtime->steps());
  summary.run_dir = dir.path();
  summary.final_val_loss = evals.final_loss(final_step);
  summary.last_val_loss = evals.last_loss();
  summary.last_eval_step = evals.last_step();
  summary.best_val_loss = evals.best_loss();
  summary.final_val_accuracy = evals.final_accuracy(final_step);
  double sim_time = 0, busy = 0;
  double member_total = 0;
  for (int i = 0; i < n; ++i) {
    Island& is = islands[i];
    member_total += member_s[i];
    summary.bytes_sent_total += is.group->bytes().sent;
    summary.bytes_recv_total += is.group->bytes().received;
    summary.steps = std::max(summary.steps, is.runtime->steps());
    summary.rounds = std::max(summary.rounds, is.rounds);
    sim_time = std::max(sim_time, end_time[i]);
    busy += is.compute_s;
  }
  summary.rounds = std::max(summary.rounds, state.rounds);
  summary.wall_time_s = seconds_since(t0);
  progress.finish(state);

  JsonObject s;
  s.add("config_hash", config_hash(config))  // `atoll sweep` skips runs that have theirs
      .add("algorithm", config.algorithm.name)
      .add("islands", k)
      .add("model", config.model.name)
      .add("params", n_params)
      .add("compression", codec.describe())
      .add("steps", summary.steps)
      .add("rounds", summary.rounds);
  evals.add_fields(s, final_step, classifier);
  uint64_t raw_sent = 0;
  for (auto& is : islands) raw_sent += is.group->bytes().raw_sent;
  s.add("bytes_sent_total", summary.bytes_sent_total)
      .add("bytes_recv_total", summary.bytes_recv_total)
      .add("compression_ratio", summary.bytes_sent_total > 0 ? static_cast<double>(raw_sent) / static_cast<double>(summary.bytes_sent_total) : 1.0)
      .add("sim_time_s", sim_time)
      .add("compute_utilization", member_total > 0 ? busy / member_total : 1.0)
      .add("step_time_s", cost.base_step_s());
  if (config.train.target_loss > 0) {
    s.add("target_loss", config.train.target_loss)
        .add("time_to_target_s", target_time)
        .add("steps_to_target", target_step)
        .add("bytes_to_target", target_bytes);
  }
  // The outputs in an order that never claims success falsely (docs/metrics.md "summary.json"):
  // the final global model (fedavg: the server's; otherwise the lowest live island's global
  // copy; DiPaCo: every path's), the end record, summary.json last (a failed write throws).
  if (server_model) write_params(dir.path() + "/final_params.bin", server->global());
  std::vector<int> members;  // the islands still members at the end
  for (int j = 0; j < n; ++j)
    if (islands[j].alive && islands[j].parts.algorithm) members.push_back(j);
  std::set<int> written;  // paths, -1: final_params.bin
  for (int j : members)
    islands[j].runtime->write_final_outputs(
        dir.path(), roles, members, [&](int p) { return written.insert(p).second; }, [](int) {});
  dir.record(JsonObject().add("event", "end").add("final_val_loss", summary.final_val_loss).str());
  RunOutcome& outcome = summary.outcome;
  outcome.status = summary.diverged ? "diverged" : "finished";
  outcome.checkpoints = config.checkpoint.every > 0;
  outcome.checkpoints_asked = checkpoints_asked;
  outcome.checkpoints_written = checkpoints_written;
  outcome.records_lost = dir.records_lost();
  outcome.records_failure = dir.first_failure();
  s.add("wall_time_s", summary.wall_time_s)
      .add("wall_threads", threads)
      .add("wall_peak_rss_mb", peak_rss_mb());
  if (summary.diverged) s.add("diverged", true).add("diverged_step", summary.diverged_step);
  add_outcome(s, outcome);
  dir.write_summary(s.str());
  return summary;
}

}  // namespace atl::core
