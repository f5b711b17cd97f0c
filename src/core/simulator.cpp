// `atoll simulate` (docs/simulator.md): the composition of its run-level objects
// (src/core/simulation.h) — set-up, restore, the scheduler's run, the outputs. The islands'
// side (their hosts, threads, membership events, hand-overs and checkpoints) is in
// src/core/sim_islands.cpp.
#include "src/core/simulator.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>

#include "src/base/log.h"
#include "src/base/status.h"
#include "src/core/components.h"
#include "src/core/json.h"
#include "src/core/network_profile.h"
#include "src/core/params_file.h"
#include "src/core/simulation.h"
#include "src/core/validate.h"

namespace atl::core {

namespace sim {

namespace {

// Peak resident memory of this process (VmHWM), in MiB; NaN where /proc is unavailable.
double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "  123 kB"
  }
  return NAN;
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

// Many islands in one process (docs/simulator.md "Memory"): glibc raises its mmap threshold
// each time a large mapped block is freed, after which the islands' long-lived
// parameter-sized buffers land in the heap between short-lived activations and pin the space
// freed around them (about 3.5 MiB an island of the quickstart's model at batch 2). A fixed
// threshold of half a parameter buffer gives each such buffer its own mapping and keeps
// smaller temporaries in the heap. Not for a few islands, where memory does not matter and
// a batch's larger activations would then be mapped and unmapped every step; not when the
// user tunes malloc.
constexpr int kManyIslands = 16;

void place_large_buffers_apart(int islands, int64_t params) {
  if (islands < kManyIslands) return;
  for (const char* v : {"GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"})
    if (std::getenv(v) != nullptr) return;
  const int64_t half = params * static_cast<int64_t>(sizeof(float)) / 2;
  const int threshold = static_cast<int>(std::clamp<int64_t>(half, int64_t{128} << 10, int64_t{32} << 20));
  if (::mallopt(M_MMAP_THRESHOLD, threshold) == 1)
    ATOLL_DEBUG("simulate: " << islands << " islands: malloc maps blocks of " << threshold << " bytes and more");
}

}  // namespace

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Simulation::Simulation(const config::Config& config, const SimulateOptions& options)
    : config_(config), options_(options), t0_(std::chrono::steady_clock::now()), roles_(config) {
  validate_config(config, Target::kSimulate);
  threads_ = configure_threads(config.run.threads);
  k_ = config.islands.count;
  n_ = k_;
  for (const auto& e : config.islands.events) n_ += e.add;
  const c10::Device device(config.run.device);  // refused here if it does not parse
  (void)device;
  torch::manual_seed(config.run.seed);

  // Resume (docs/checkpoints.md "Resuming"): a run directory that exists continues from its
  // newest usable checkpoint; none there yet: a fresh start.
  const std::string run_path = (std::filesystem::path(config.run.out_dir) / config.run.name).string();
  ckpt_path_ = config.checkpoint.dir.empty() ? (std::filesystem::path(run_path) / "checkpoints").string()
                                             : config.checkpoint.dir;
  if (config.run.resume && !options.force && std::filesystem::exists(run_path))
    resumed_ = load_resume_point(config, run_path, ckpt_path_, n_);

  // Data, models, algorithm: everything that can fail on user input, before the run dir.
  config::Config data_config = config;  // shards for every island, including added ones
  data_config.islands.count = n_;
  data_ = load_run_data(data_config);
  algo_options_ = algorithm_options(config, data_.shard_sizes);
  codec_ = make_pipeline(config);
  place_large_buffers_apart(n_, models::estimate_numel(config.model, data_.shape));
  scheduler_ = std::make_unique<transport::Scheduler>(n_);
  hub_ = std::make_unique<transport::InprocHub>(n_, *scheduler_);
  hub_->set_rank_links(config.network.rank_links);
  islands_.resize(static_cast<size_t>(n_));
  shares_gradient_ = algorithms::algorithm_traits(config.algorithm.name).step_local_gradient;
  for (int i = 0; i < n_; ++i) {
    islands_[i].parts = make_island_parts(config, data_, algo_options_, i);
    share_gradient(islands_[i].parts);  // before the next island's model is built
  }
  evaluator_ = make_evaluator(config, data_);
  n_params_ = islands_[0].parts.model->numel();

  // The virtual clock: compute and network models.
  network_ = make_network_model(config);
  const double examples_per_step = static_cast<double>(config.train.batch_size) * config.train.grad_accum *
                                   (data_.classifier ? 1.0 : static_cast<double>(config.model.seq_len));
  cost_ = std::make_unique<CostModel>(config.compute, islands_[0].parts.model->flops_per_example() * examples_per_step,
                                      n_, config.run.seed);
  open_run_dir();

  state_.steps_total = static_cast<int64_t>(k_) * config.train.steps;
  // Survivors notice a dead island after the heartbeat timeout, as in real runs.
  hub_->set_network(&network_, config.run.seed, static_cast<double>(config.transport.heartbeat_timeout_ms) / 1e3);
  hub_->set_star(config.transport.collective == "star");  // all-reduce through the server, as real runs do
  make_server();
  if (resumed_) hub_->restore(resumed_->hub);  // before the groups, which read their sequence numbers
  for (int i = 0; i < n_; ++i) {
    islands_[i].group = make_group(i);
    islands_[i].time = std::make_unique<VirtualTime>(*scheduler_, i);
  }
  membership_ = Membership(config, n_);
  for (int j = k_; j < n_; ++j) {
    islands_[j].alive = false;
    if (!resumed_) hub_->remove_member(j, 0, /*failure=*/false);  // a restored hub has its members
  }
  make_checkpoints();
  for (int i = 0; i < n_; ++i) make_runtime(i);
  if (resumed_) restore(*resumed_);
  else evaluate_start();
}

void Simulation::open_run_dir() {
  if (resumed_) dir_.emplace(config_, RunDir::Continue{resumed_->metrics_bytes});
  else dir_.emplace(config_, options_.force);
  checkpoints_ = std::make_unique<checkpoint::CheckpointDir>(ckpt_path_, config_.checkpoint.keep);
  if (!resumed_) {  // a fresh start: checkpoints of an earlier run here are not this run's
    for (const auto& e : checkpoints_->list()) std::filesystem::remove(e.path);
  }
  const data::Splits& splits = data_.splits;
  data::write_normalization(splits.normalization, splits.train->input_dim(), dir_->path());  // data.normalize
  progress_ = std::make_unique<Progress>(options_.quiet ? Progress::Mode::kQuiet : Progress::Mode::kAuto);
  progress_->message("atoll simulate: " + config_.run.name + ": " + config_.algorithm.name + ", " +
                     std::to_string(k_) + (k_ == 1 ? " island, " : " islands, ") + config_.model.name + " " +
                     std::to_string(n_params_) + " params, " + splits.train->describe() + ", " +
                     std::to_string(threads_) + " threads -> " + dir_->path() +
                     (resumed_ ? " (resumed after step " + std::to_string(resumed_->step) + ")" : ""));
  if (!resumed_)
    dir_->record(JsonObject()
                     .add("event", "start")
                     .add("algorithm", config_.algorithm.name)
                     .add("islands", k_)
                     .add("params", n_params_)
                     .add("compression", codec_.describe())
                     .add("train_examples", splits.train->size())
                     .add("val_examples", splits.val->size())
                     .add("wall_threads", threads_)
                     .str());
}

// The server role (fedavg, async_local_sgd, src/core/server_host.h) on the virtual clock.
void Simulation::make_server() {
  ServerHost::Hooks hooks;
  // fedavg knows when the round closed (a deadline, a loss noticed); otherwise the pusher,
  // which runs the server, holds the time.
  hooks.round_time = [this](const algorithms::ServerRound& r) {
    return std::isnan(r.at_s) ? scheduler_->time(scheduler_->current()) : r.at_s;
  };
  hooks.wall_s = [t0 = t0_] { return seconds_since(t0); };
  hooks.record = [this](const std::string& json) { dir_->record(json); };
  hooks.evaluate = [this](int64_t step, const at::Tensor& params, double at_s) { server_evaluate(step, params, at_s); };
  hooks.after_round = [this](const algorithms::ServerRound& r) {
    if (server_->counts_rounds()) state_.rounds = std::max(state_.rounds, r.round);
  };
  server_ = ServerHost::make(algo_options_, config_.train, data_.splits.train->size(),
                             islands_[0].parts.model->params(), std::move(hooks));
  hub_->set_server(server_ ? &server_->server() : nullptr);
}

// Checkpoints (src/core/checkpoint_gathering.h): an island's state is read at the write, not
// when it marks the cut: a collective it posted may complete only when a later island posts
// (diloco with overlap: the average lands in its buffer then).
void Simulation::make_checkpoints() {
  // Virtual seconds of a nominal step of the fastest island (CheckpointCut::kServerTime).
  const double cut_unit_s = cost_->base_step_s() / *std::max_element(cost_->speeds().begin(), cost_->speeds().end());
  const int64_t start = resumed_ ? resumed_->step : 0;
  for (Island& is : islands_) is.checkpoints = CheckpointSchedule(config_.checkpoint.every, start, cut_unit_s);
  CheckpointGathering::Hooks gather;
  // A joiner handed over after the cut is not due at it.
  gather.due = [this](int j, int64_t cut) { return islands_[j].checkpoints.due() <= cut; };
  // async_local_sgd: a push posted before the cut's time that reached the server after it.
  const bool cut_in_time = islands_[0].parts.algorithm->checkpoint_cut() == algorithms::CheckpointCut::kServerTime;
  gather.skip = [this, cut_in_time, cut_unit_s](int64_t cut) -> std::string {
    // A joiner between its join time and its first step is in no island's state.
    for (int j = 0; j < n_; ++j)
      if (membership_.joining[j]) return "an island is joining";
    return cut_in_time && hub_->last_push_arrival() >= static_cast<double>(cut) * cut_unit_s ? "a push in flight" : "";
  };
  gathering_.emplace(start, std::move(gather));
}

// Every island, the shared accounting and the RNGs as they were at the checkpoint.
void Simulation::restore(const SimCheckpoint& resumed) {
  for (int i = 0; i < n_; ++i) {
    const IslandCheckpoint& c = resumed.islands[static_cast<size_t>(i)];
    Island& is = islands_[i];
    if (c.alive) {
      restore_training(is.parts, *is.runtime, c);
    } else {
      // Dead (or not added yet): its steps so far; a rejoin starts from a hand-over.
      is.runtime->resume(c.runtime, std::nullopt);
      if (!is.parts.use_path) is.parts.sampler->seek(c.sampler);
    }
    scheduler_->set_time(i, c.time_s);
    is.compute_s = c.compute_s;
    is.time->slept_s = c.slept_s;
    is.last_compute_s = c.last_compute_s;
    is.last_comm_s = c.last_comm_s;
    is.last_waited_s = c.last_waited_s;
    is.last_slept_s = c.last_slept_s;
    membership_.member_since[i] = c.member_since_s;
    membership_.member_s[i] = c.member_s;
    membership_.end_time[i] = c.end_time_s;
    is.rounds = c.rounds;
    is.planned = c.planned;
    is.alive = c.alive;
    is.finished = c.finished;
    is.gone = is.finished;  // a checkpoint waits for it no more
  }
  for (auto& of_island : membership_.kills)
    for (Membership::Kill& kill : of_island)
      kill.fired = std::binary_search(resumed.kills_fired.begin(), resumed.kills_fired.end(), kill.index);
  cost_->load(resumed.cost_model);
  if (resumed.has_server && server_) server_->load(resumed.server, resumed.server_round, resumed.server_time);
  state_ = resumed.progress;
  evals_.evals.restore(resumed.evals);
  evals_.target_time = resumed.target_time;
  evals_.target_bytes = resumed.target_bytes;
  evals_.target_step = resumed.target_step;
  if (resumed.torch_rng.defined()) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default's state
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(resumed.torch_rng);
  }
}

// Step 0 of a fresh start: the initial model, evaluated by the server role, or by island 0
// as the lead (the first island of every path, its path's).
void Simulation::evaluate_start() {
  if (islands_[0].parts.algorithm->global_on_server()) {
    server_->evaluate_start(islands_[0].parts.model->params());
    return;
  }
  std::set<int> started;
  for (int i = 0; i < n_; ++i)
    if (started.insert(islands_[i].parts.eval_path).second) islands_[i].runtime->evaluate_start();
}

RunSummary Simulation::run() {
  RunSummary summary;
  try {
    scheduler_->run([this](int i) { island_thread(i); });
  } catch (const Diverged& d) {
    // Reported, not hidden: the record, the summary's flag and an error from simulate().
    summary.diverged = true;
    summary.diverged_island = d.island;
    summary.diverged_step = d.step;
    dir_->record(JsonObject().add("event", "diverged").add("island", d.island).add("step", d.step).str());
  }
  return finish(std::move(summary));
}

RunSummary Simulation::finish(RunSummary summary) {
  // The server's final model is evaluated even when churn kept the last round from being
  // the planned one (evaluate() skips a step it has already done).
  if (server_) server_->evaluate_final();

  // The final eval is the one at the step the run ended on: the server's last round, or the
  // last step of the islands that finished. Anything else (every island died or diverged)
  // leaves final_val_loss null and says where the last eval was.
  const bool server_model = server_ && server_->global().defined();
  int64_t final_step = server_model ? server_->final_step() : -1;
  for (const Island& is : islands_)
    if (!server_model && is.finished) final_step = std::max(final_step, is.runtime->steps());
  const EvalSummary& evals = evals_.evals;
  RunDir& dir = *dir_;
  summary.run_dir = dir.path();
  summary.final_val_loss = evals.final_loss(final_step);
  summary.last_val_loss = evals.last_loss();
  summary.last_eval_step = evals.last_step();
  summary.best_val_loss = evals.best_loss();
  summary.final_val_accuracy = evals.final_accuracy(final_step);
  double sim_time = 0, busy = 0;
  double member_total = 0;
  for (int i = 0; i < n_; ++i) {
    Island& is = islands_[i];
    member_total += membership_.member_s[i];
    summary.bytes_sent_total += is.group->bytes().sent;
    summary.bytes_recv_total += is.group->bytes().received;
    summary.steps = std::max(summary.steps, is.runtime->steps());
    summary.rounds = std::max(summary.rounds, is.rounds);
    sim_time = std::max(sim_time, membership_.end_time[i]);
    busy += is.compute_s;
  }
  summary.rounds = std::max(summary.rounds, state_.rounds);
  summary.wall_time_s = seconds_since(t0_);
  progress_->finish(state_);

  JsonObject s;
  s.add("config_hash", config_hash(config_))  // `atoll sweep` skips runs that have theirs
      .add("algorithm", config_.algorithm.name)
      .add("islands", k_)
      .add("model", config_.model.name)
      .add("params", n_params_)
      .add("compression", codec_.describe())
      .add("steps", summary.steps)
      .add("rounds", summary.rounds);
  evals.add_fields(s, final_step, data_.classifier);
  uint64_t raw_sent = 0;
  for (auto& is : islands_) raw_sent += is.group->bytes().raw_sent;
  s.add("bytes_sent_total", summary.bytes_sent_total)
      .add("bytes_recv_total", summary.bytes_recv_total)
      .add("compression_ratio", summary.bytes_sent_total > 0 ? static_cast<double>(raw_sent) / static_cast<double>(summary.bytes_sent_total) : 1.0)
      .add("sim_time_s", sim_time)
      .add("compute_utilization", member_total > 0 ? busy / member_total : 1.0)
      .add("step_time_s", cost_->base_step_s());
  if (config_.train.target_loss > 0) {
    s.add("target_loss", config_.train.target_loss)
        .add("time_to_target_s", evals_.target_time)
        .add("steps_to_target", evals_.target_step)
        .add("bytes_to_target", evals_.target_bytes);
  }
  // The outputs in an order that never claims success falsely (docs/metrics.md "summary.json"):
  // the final global model (fedavg: the server's; otherwise the lowest live island's global
  // copy; several paths: every path's), the end record, summary.json last (a failed write throws).
  if (server_model) write_params(dir.path() + "/final_params.bin", server_->global());
  std::vector<int> members;  // the islands still members at the end
  for (int j = 0; j < n_; ++j)
    if (islands_[j].alive && islands_[j].parts.algorithm) members.push_back(j);
  std::set<int> written;  // paths, -1: final_params.bin
  for (int j : members)
    islands_[j].runtime->write_final_outputs(
        dir.path(), roles_, members, [&](int p) { return written.insert(p).second; }, [](int) {});
  dir.record(JsonObject().add("event", "end").add("final_val_loss", summary.final_val_loss).str());
  RunOutcome& outcome = summary.outcome;
  outcome.status = summary.diverged ? "diverged" : "finished";
  outcome.checkpoints = config_.checkpoint.every > 0;
  outcome.checkpoints_asked = checkpoints_asked_;
  outcome.checkpoints_written = checkpoints_written_;
  outcome.records_lost = dir.records_lost();
  outcome.records_failure = dir.first_failure();
  s.add("wall_time_s", summary.wall_time_s)
      .add("wall_threads", threads_)
      .add("wall_peak_rss_mb", peak_rss_mb());
  if (summary.diverged) s.add("diverged", true).add("diverged_step", summary.diverged_step);
  add_outcome(s, outcome);
  dir.write_summary(s.str());
  return summary;
}

}  // namespace sim

RunSummary simulate(const config::Config& config, const SimulateOptions& options) {
  sim::Simulation simulation(config, options);
  return simulation.run();
}

}  // namespace atl::core
