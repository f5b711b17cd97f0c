// The islands' side of `atoll simulate` (src/core/simulation.h): each island's host (the
// virtual clock, the hub's group, the run directory as record sink, the exact membership, and
// at its step boundaries the cost model, kills, scheduling, hand-overs and checkpoints), its
// scheduler thread, the event injector's kills and joins, and the checkpoint writes.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/base/log.h"
#include "src/core/json.h"
#include "src/core/records.h"
#include "src/core/simulation.h"
#include "transport/shards.h"
#include "src/train/inner_optimizer.h"

namespace atl::core::sim {

Membership::Membership(const config::Config& config, int islands)
    : kills(static_cast<size_t>(islands)),
      joins(static_cast<size_t>(islands)),
      member_since(static_cast<size_t>(islands), 0.0),
      member_s(static_cast<size_t>(islands), 0.0),
      end_time(static_cast<size_t>(islands), 0.0),
      handovers(static_cast<size_t>(islands)),
      joining(static_cast<size_t>(islands), 0) {
  int next_added = config.islands.count;
  for (size_t ei = 0; ei < config.islands.events.size(); ++ei) {
    const auto& e = config.islands.events[ei];
    if (e.kill >= 0) kills[static_cast<size_t>(e.kill)].push_back({e, static_cast<int64_t>(ei)});
    if (e.rejoin >= 0) joins[static_cast<size_t>(e.rejoin)].push_back(e.at_time_s);
    for (int a = 0; a < e.add; ++a) joins[static_cast<size_t>(next_added++)].push_back(e.at_time_s);
  }
  for (auto& j : joins) std::sort(j.begin(), j.end());
  joins_planned = std::any_of(joins.begin(), joins.end(), [](auto& j) { return !j.empty(); });
}

// Each island's runtime: the simulator supplies the virtual clock, the in-process group, the
// run directory as record sink, the exact membership (the lead is the lowest live island),
// and at step boundaries the cost model, kills, scheduling and hand-overs.
IslandHost Simulation::make_host(int i) {
  Island& is = islands_[i];
  IslandHost host;
  host.time = is.time.get();
  host.virtual_clock = true;
  host.shared = &shared_tensors_;
  host.share.ranks = config_.islands.ranks.of(i);  // executed here, one share after the other
  host.rank_sum = &rank_sum_;                       // one sum for all islands: used within a step
  host.wall_s = [t0 = t0_] { return seconds_since(t0); };
  host.record = [this](const std::string& json) { dir_->record(json); };
  // The lowest live island evaluates the global model for algorithms that keep it on the
  // islands (while running: the lowest running one; once finished, it evaluates steps it
  // kept only when no lower island is still running).
  host.is_lead = [this, i] { return lead_for_evals(i); };
  host.eval_recorded = [this, i](int64_t step) { return evals_.evals.evaluated(step, islands_[i].parts.eval_path); };
  host.after_eval = [this, i](int64_t step, const EvalResult& r) { after_eval(step, r, scheduler_->time(i)); };
  // A finished island with kept steps waits for the lead to record them or to die.
  host.wait = [this, i](double) {
    const size_t recorded = evals_.evals.count();
    scheduler_->block_until(
        i, [this, i, recorded] { return evals_.evals.count() != recorded || lead_for_evals(i); },
        "eval steps kept for a slower lead");
  };
  host.eval_patience_s = INFINITY;  // the lead is known exactly: no timeout
  host.eval_settle_every_s = 0;     // recorded() is a set lookup
  host.eval_bytes = [this] { return total_bytes(); };
  host.after_round = [this, i](const algorithms::RoundInfo& r) {
    islands_[i].rounds = r.round;
    state_.rounds = std::max(state_.rounds, r.round);
  };
  host.round_times = [this, i] { return round_times(i); };
  host.after_compute = [this, i](int64_t) { after_compute(i); };
  host.compute_ends_after_step = shares_gradient_;  // the clock moves while the gradient is free
  host.before_records = [this, i](int64_t step, int64_t total, double loss) {
    if (!std::isfinite(loss)) throw Diverged(i, step, loss);
    if (!islands_[i].planned) {
      state_.steps_total += total - config_.train.steps;
      islands_[i].planned = true;
    }
  };
  host.after_step = [this, i](int64_t step, int64_t total, double loss, double) { after_step(i, step, total, loss); };
  // A client of fedavg whose first pull (after a resume: its next) is at or past a cut
  // arrives there before it.
  host.after_setup = [this, i](int64_t step) {
    if (islands_[i].parts.algorithm->checkpoint_cut() != algorithms::CheckpointCut::kStep)
      maybe_checkpoint(i, step, std::numeric_limits<int64_t>::max());
  };
  return host;
}

// Island i's group on the hub; with islands.shard_exchange its outer all-reduces run as one
// per rank's shard (transport/shards.h), each shard a sub-group of every island that may take
// part, as a real run's rank r exchanges shard r with the other islands' ranks r.
std::unique_ptr<transport::Group> Simulation::make_group(int i) {
  std::unique_ptr<transport::Group> g = hub_->make_group(i);
  if (!config_.islands.shard_exchange) return g;
  std::vector<int> ids(static_cast<size_t>(n_));
  for (int j = 0; j < n_; ++j) ids[static_cast<size_t>(j)] = j;
  return transport::sharded_group(std::move(g), config_.islands.ranks.of(i), std::move(ids));
}

void Simulation::make_runtime(int i) {
  Island& is = islands_[i];
  is.runtime = std::make_unique<IslandRuntime>(i, is.parts, config_.train, is.group.get(), &codec_,
                                               data_.shard_sizes[i], evaluator_.get(), data_.classifier, make_host(i));
  // async_local_sgd: a cut may also fall between two server calls of one boundary.
  is.runtime->context().before_server_call = [this, i] {
    maybe_checkpoint(i, islands_[i].runtime->steps(), std::numeric_limits<int64_t>::max());
  };
  is.runtime->context().speed = cost_->speeds()[static_cast<size_t>(i)];
}

// Islands compute one at a time, and with a step-local gradient (AlgorithmTraits) no island
// keeps anything in its gradient between steps, nor lets the clock move (and so another island
// run) between its backward and its optimizer step: the islands of one model size share one
// gradient buffer.
void Simulation::share_gradient(IslandParts& parts) {
  if (!shares_gradient_) return;
  models::Model& model = *parts.model;
  at::Tensor& shared = gradients_[model.numel()];
  if (shared.defined()) model.use_gradients(shared);
  else shared = model.grads();
}

RoundTimes Simulation::round_times(int i) {
  Island& me = islands_[i];
  const auto waits = hub_->wait_time(i);
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
}

void Simulation::after_compute(int i) {
  double dt = cost_->next_step_s(i);
  if (const int r = config_.islands.ranks.of(i); r > 1) {
    // R ranks share the step, then all-reduce the gradient in a ring on the island's fabric:
    // 2 (R - 1) messages of N / R values each way (docs/ranks.md).
    const double bytes = 4.0 * static_cast<double>(n_params_) * 2.0 * (r - 1) / r;
    dt = dt / (r * config_.compute.rank_scaling) + bytes * 8.0 / (config_.network.intra_island_mbps * 1e6) +
         2.0 * (r - 1) * config_.network.intra_island_latency_ms * 1e-3;
  }
  islands_[i].compute_s += dt;
  scheduler_->advance(i, scheduler_->time(i) + dt);
  for (auto& kill : membership_.kills[static_cast<size_t>(i)])
    if (!kill.fired && kill.event.at_time_s >= 0 && scheduler_->time(i) >= kill.event.at_time_s)
      die(i, kill, "at_time_s");
}

void Simulation::after_step(int i, int64_t step, int64_t total, double loss) {
  Island& me = islands_[i];
  ++state_.steps_done;
  state_.last_loss = loss;
  state_.bytes = total_bytes();
  progress_->update(state_);
  // Joiners wait for this step boundary; those earlier on the clock must have asked.
  if (membership_.joins_planned) scheduler_->yield(i);
  if (!membership_.pending.empty() && me.parts.algorithm->can_hand_over()) hand_over(i, step, running());
  for (auto& kill : membership_.kills[static_cast<size_t>(i)])
    if (!kill.fired && kill.event.at_step == step) die(i, kill, "at_step");
  maybe_checkpoint(i, step, total);
}

void Simulation::record_membership(int i, const char* change, const char* why) {
  const transport::MembershipView view = islands_[i].group->view();
  dir_->record(membership_record(
      MembershipChange{i, change, why, islands_[i].runtime->steps(), view.epoch, view.members},
      RecordTime{seconds_since(t0_), scheduler_->time(i)}));
}

// A death may complete the gathering of a checkpoint that waited only for this island.
void Simulation::die(int i, Membership::Kill& kill, const char* why) {
  Island& is = islands_[i];
  kill.fired = true;
  scheduler_->yield(i);  // islands earlier on the clock act before the death
  is.alive = false;
  hub_->remove_member(i, scheduler_->time(i));
  membership_.member_s[i] += scheduler_->time(i) - membership_.member_since[i];
  membership_.end_time[i] = scheduler_->time(i);
  record_membership(i, "killed", why);
  complete_checkpoints();
  throw IslandKilled{};
}

void Simulation::island_thread(int i) {
  at::init_num_threads();
  Island& is = islands_[i];
  if (is.finished) return;  // resumed: it had finished before the checkpoint
  size_t next_join = 0;
  for (bool member = is.alive;; member = true) {
    if (member) {
      try {
        is.runtime->run();
        scheduler_->yield(i);  // finish() may have moved the clock
        membership_.member_s[i] += scheduler_->time(i) - membership_.member_since[i];
        membership_.end_time[i] = scheduler_->time(i);
        const std::vector<int> live = running();  // with this island, for its joiners
        is.finished = true;
        // As in real runs: each island's final global model, by hash (equal on islands that
        // agree bitwise, e.g. after an exact state hand-over).
        is.runtime->finish();
        // Joiners still waiting get the final state (they have no steps left to run).
        if (!membership_.pending.empty()) hand_over(i, is.runtime->steps(), live);
        // A checkpoint gathered while this island ran its last steps waits for it no more.
        is.gone = true;
        complete_checkpoints();
        return;
      } catch (const IslandKilled&) {
        // Unwound; its collectives completed without it. Drop the algorithm now: it may hold
        // handles into the hub.
        is.parts.algorithm.reset();
      }
    }
    if (!rejoin(i, next_join)) return;
  }
}

bool Simulation::rejoin(int i, size_t& next_join) {
  Island& is = islands_[i];
  Membership& m = membership_;
  const std::vector<double>& joins = m.joins[static_cast<size_t>(i)];
  while (next_join < joins.size() && joins[next_join] < scheduler_->time(i)) ++next_join;
  if (next_join >= joins.size()) return false;
  VirtualTime waiting(*scheduler_, i);
  waiting.sleep_until_s(joins[next_join++]);
  scheduler_->yield(i);                                   // the others' state at the join time
  if (roles_.donor(i, running()) < 0) return false;  // nobody left to hand the state over
  m.handovers[i] = {};
  m.pending.push_back(i);
  m.joining[i] = 1;
  scheduler_->block_until(
      i, [this, i] { return membership_.handovers[i].ready || roles_.donor(i, running()) < 0; }, "state hand-over");
  if (!m.handovers[i].ready) {  // every donor finished or died meanwhile
    m.pending.erase(std::remove(m.pending.begin(), m.pending.end(), i), m.pending.end());
    m.joining[i] = 0;
    return false;
  }
  Membership::Arriving& a = m.handovers[i];
  // Fresh inner optimizer and algorithm on the global model, then the donor's state (the
  // runtime imports it after setup and goes on after the donor's step).
  is.parts.optimizer = train::make_inner_optimizer(config_.train);
  is.parts.algorithm = algorithms::make_algorithm(algo_options_, i);
  is.group = make_group(i);
  is.time->sleep_until_s(a.arrival);
  scheduler_->yield(i);  // others earlier on the clock do not see it yet
  is.alive = true;
  m.joining[i] = 0;
  m.member_since[i] = scheduler_->time(i);
  is.checkpoints.restart_after(a.handover.step);  // due at the next multiple after the donor's step
  a.handover.epoch = is.group->view().epoch;
  is.runtime->join(std::move(a.handover), is.group.get());
  record_membership(i, i < k_ ? "rejoined" : "added", "event");
  return true;
}

// Who evaluates and who hands state over (src/core/roles.h), on the simulator's view of the
// running islands: alive and unfinished.
std::vector<int> Simulation::running() const {
  std::vector<int> r;
  for (int j = 0; j < n_; ++j)
    if (islands_[j].alive && !islands_[j].finished) r.push_back(j);
  return r;
}

int Simulation::evaluator_island() const {
  for (int j = 0; j < n_; ++j)
    if (islands_[j].alive && !islands_[j].finished) return j;
  return -1;
}

// Island `donor` at the boundary after `step` serves the pending joiners whose donor it is
// among `live`: the hub carries each hand-over and makes the joiner a member from the
// donor's next collective on.
void Simulation::hand_over(int donor, int64_t step, const std::vector<int>& live) {
  std::erase_if(membership_.pending, [&](int j) {
    if (roles_.donor(j, live) != donor) return false;
    Membership::Arriving& a = membership_.handovers[j];
    a.handover = export_handover(donor, *islands_[donor].parts.algorithm, step, hub_->next_seq(donor));
    a.arrival = hub_->hand_over(donor, j, handover_bytes(a.handover), scheduler_->time(donor));
    hub_->add_member(j, a.handover.first_seq);
    a.ready = true;
    return true;
  });
}

uint64_t Simulation::total_bytes() const {
  uint64_t b = 0;
  for (auto& is : islands_)
    if (is.group) b += is.group->bytes().sent;
  return b;
}

// After each eval record (an island's, or the server role's).
void Simulation::after_eval(int64_t step, const EvalResult& path_or_eval, double sim_time) {
  EvalResult r = path_or_eval;
  EvalSummary& evals = evals_.evals;
  if (r.path >= 0) {  // one path's record; the routed eval once every path's is in
    std::optional<EvalResult> routed = evals.add_path(step, r);
    if (!routed) return;
    r = *routed;
    dir_->record(eval_record(-1, step, r, data_.classifier, total_bytes(), RecordTime{seconds_since(t0_), sim_time}));
  }
  evals.add(step, r.loss, r.accuracy);
  state_.val_loss = r.loss;
  if (config_.train.target_loss > 0 && evals_.target_step < 0 && r.loss <= config_.train.target_loss) {
    evals_.target_step = step;
    evals_.target_time = sim_time;
    evals_.target_bytes = static_cast<double>(total_bytes());
  }
}

// The server role's global model (islands evaluate theirs through their runtime).
void Simulation::server_evaluate(int64_t step, const at::Tensor& params, double sim_time) {
  if (evals_.evals.evaluated(step)) return;
  EvalResult r = evaluator_->evaluate(params);
  dir_->record(eval_record(-1, step, r, data_.classifier, total_bytes(), RecordTime{seconds_since(t0_), sim_time}));
  after_eval(step, r, sim_time);
}

void Simulation::maybe_checkpoint(int i, int64_t step, int64_t total) {
  for (int64_t cut : islands_[i].checkpoints.take_due(*islands_[i].parts.algorithm, step, total)) {
    if (!gathering_->mark(i, cut)) continue;  // done (or skipped) without this island
    complete_checkpoints();
    if (gathering_->done(cut)) {
      scheduler_->yield(i);  // the next to run is the one a resumed run starts with
      continue;
    }
    scheduler_->block_until(
        i, [this, cut] { return gathering_->done(cut); }, "the others to reach the checkpoint of " + std::to_string(cut));
  }
}

// Taking part in checkpoints: the islands alive whose thread is not done.
void Simulation::complete_checkpoints() {
  std::vector<int> taking_part;
  for (int j = 0; j < n_; ++j)
    if (islands_[j].alive && !islands_[j].gone) taking_part.push_back(j);
  for (const CheckpointGathering::Cut& cut : gathering_->complete(taking_part)) {
    if (cut.skipped.empty()) write_checkpoint(cut.step);
    else ATOLL_DEBUG("checkpoint of step " << cut.step << " skipped: " << cut.skipped);
  }
}

// Dead islands are saved as dead (their clock, which kills fired).
IslandCheckpoint Simulation::island_state(int i) {
  Island& is = islands_[i];
  IslandCheckpoint c;
  if (is.alive) {
    static_cast<IslandTraining&>(c) = capture_training(is.parts, *is.runtime);
  } else {  // a dead island keeps only its accounting and data position (a rejoin reads on)
    c.sampler = is.parts.sampler->position();
    c.runtime = is.runtime->saved();
  }
  c.time_s = scheduler_->time(i);
  c.compute_s = is.compute_s;
  c.slept_s = is.time->slept_s;
  c.last_compute_s = is.last_compute_s;
  c.last_comm_s = is.last_comm_s;
  c.last_waited_s = is.last_waited_s;
  c.last_slept_s = is.last_slept_s;
  c.member_since_s = membership_.member_since[i];
  c.member_s = membership_.member_s[i];
  c.end_time_s = membership_.end_time[i];
  c.rounds = is.rounds;
  c.planned = is.planned;
  c.alive = is.alive;
  c.finished = is.finished;
  return c;
}

void Simulation::write_checkpoint(int64_t step) {
  SimCheckpoint c;
  c.step = step;
  c.metrics_bytes = dir_->metrics_bytes();
  c.config_hash = resume_hash(config_);
  c.global = server_ && server_->global().defined() ? server_->global()
                                                    : islands_[evaluator_island()].parts.algorithm->global_params();
  if (server_) {  // the server role (fedavg): cut between its rounds
    c.has_server = true;
    c.server = server_->save();
    c.server_time = server_->time();
    c.server_round = server_->round();
  }
  c.hub = hub_->snapshot();
  c.cost_model = cost_->save();
  c.progress = state_;
  c.evals = evals_.evals.saved();
  c.target_time = evals_.target_time;
  c.target_bytes = evals_.target_bytes;
  c.target_step = evals_.target_step;
  c.torch_rng = at::detail::getDefaultCPUGenerator().get_state();
  c.islands.resize(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) c.islands[static_cast<size_t>(i)] = island_state(i);
  for (int i = 0; i < n_; ++i)
    for (const Membership::Kill& kill : membership_.kills[static_cast<size_t>(i)])
      if (kill.fired) c.kills_fired.push_back(kill.index);
  std::sort(c.kills_fired.begin(), c.kills_fired.end());
  // A checkpoint that cannot be written costs only the ability to resume from it.
  const auto started = std::chrono::steady_clock::now();
  const std::vector<checkpoint::Section> sections = encode_sim_checkpoint(c);
  size_t bytes = 0;
  for (const auto& sec : sections) bytes += sec.data.size();
  ++checkpoints_asked_;
  if (Status st = checkpoints_->save(step, sections); !st.is_ok()) {
    const std::string what = "checkpoint of step " + std::to_string(step) + " not written: " + st.to_string();
    if (config_.checkpoint.on_failure == "stop") throw OutputError(what + " (checkpoint.on_failure: stop)");
    ATOLL_WARN(what);
  } else {
    ++checkpoints_written_;
    ATOLL_DEBUG("checkpoint of step " << step << ": " << bytes / 1e6 << " MB in " << seconds_since(started) << " s");
  }
}

}  // namespace atl::core::sim
