// An island process's checkpoints and hand-overs (docs/checkpoints.md "Gathering", "Real
// runs", "A checkpoint on a signal"; src/run/handover.h): the checkpoint it resumes from, the
// cuts it writes and marks, the cut a signal asks for, and the state it hands to joiners.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>

#include "src/base/log.h"
#include "src/run/island_process.h"
#include "src/core/sim_checkpoint.h"

namespace atl::run {

namespace {
std::atomic<bool> g_checkpoint_signal{false};
extern "C" void checkpoint_on_signal(int) { g_checkpoint_signal = true; }
}  // namespace

void arm_checkpoint_signal(bool rank0) {
  std::signal(SIGUSR1, rank0 ? checkpoint_on_signal : SIG_IGN);
  g_checkpoint_signal = false;
}

// The checkpoint this island resumes from (the coordinator set the key before the start).
Status IslandProcess::load_resume_point() {
  if (!config_.run.resume || late_) return Status::ok();
  auto got = client_->store_peek(kResumeKey);
  if (!got.is_ok()) return failed(got.status());
  const std::string value = got.value() ? std::string(got.value()->begin(), got.value()->end()) : "fresh";
  if (value.rfind("step:", 0) != 0) return Status::ok();
  const std::vector<int64_t> step = parse_steps(value.substr(5));
  if (step.size() != 1) return failed(corrupt("malformed resume decision '" + value + "'"));
  const std::string path = ckpt_dir_.path() + "/" + checkpoint::CheckpointDir::file_name(step[0]);
  auto file = checkpoint::read_checkpoint(path);
  if (!file.is_ok()) return failed(file.status(), "cannot resume: ");
  auto c = decode_island(file.value(), "checkpoint '" + path + "'");
  if (!c.is_ok()) return failed(c.status(), "cannot resume: ");
  resumed_ = std::move(c.value());
  ATOLL_INFO("island " << island_ << ": resuming after step " << resumed_->step << " from " << path);
  return Status::ok();
}


// Checkpoints (docs/checkpoints.md "Gathering", "Real runs"): at a due step boundary every
// island writes its own file, then marks it in the store (after its records up to the step, on
// the same connection; the coordinator's core::CheckpointGathering takes the mark) and waits
// until the coordinator has written its own: every island then holds the same step, and
// metrics.jsonl is cut at it.
void IslandProcess::checkpoint_at(int64_t step) {
  IslandProcessCheckpoint c;
  // First: the exchange in flight completes (its bytes and its result belong to the cut).
  c.in_flight = parts_.algorithm->wait_in_flight();
  if (outer_shards_) outer_shards_->gather_all();  // the ranks' shards of the outer state, as rank_outer_shards says
  c.step = step;
  c.config_hash = ckpt_hash_;
  c.island = island_;
  c.islands = k_;
  c.global = parts_.algorithm->global_params();
  static_cast<core::IslandTraining&>(c) = core::capture_training(parts_, *runtime_);
  if (outer_shards_) outer_shards_->release_all();
  c.bytes = timed_->bytes();
  c.torch_rng = at::detail::getDefaultCPUGenerator().get_state();
  c.group_seqs = data_plane_->next_seqs();
  if (shard_dir_) put_shard_seqs(rank_shard_.seqs, c.group_seqs);  // where each rank's shard plane is
  const auto started_at = Clock::now();
  // A file that cannot be written is still marked, with why as the mark's value: the
  // coordinator counts the cut as not written (and stops the run under
  // checkpoint.on_failure: stop); a resume finds the file missing and falls back.
  std::string not_written;
  if (Status st = ckpt_dir_.save(step, encode_island(c)); !st.is_ok()) {
    not_written = st.to_string().substr(0, 400);
    ATOLL_WARN("island " << island_ << ": checkpoint of step " << step << " not written: " << not_written);
  } else {
    ATOLL_DEBUG("island " << island_ << ": checkpoint of step " << step << " in " << seconds_since(started_at) << " s");
  }
  mark_cut(step, not_written);
}

// Marks the cut of `step` (with why this island's file of it was not written, if it was not)
// and waits until the coordinator has completed it. Both wait out a coordinator that is away
// for a while (restarted: it picks the run up).
void IslandProcess::mark_cut(int64_t step, const std::string& not_written) {
  const std::string what = "island " + std::to_string(island_) + ": checkpoint of step " + std::to_string(step);
  auto retry = [&](const Status& st) {
    if (Status run = in_run(); !run.is_ok()) throw StatusError(what, run);
    if (st.code() != StatusCode::kTimeout) throw StatusError(what, st);
  };
  const std::vector<uint8_t> mark(not_written.begin(), not_written.end());
  for (Status st; !(st = client_->store_set(checkpoint_mark_key(step, island_), mark)).is_ok();) retry(st);
  for (;;) {
    auto done = client_->store_get(checkpoint_done_key(step), Clock::now() + std::chrono::seconds(5));
    if (done.is_ok()) break;
    retry(done.status());
  }
}

// The margin of an asked cut covers the islands of a synchronous run being a round or two
// apart and each learning of the cut up to a second (its poll) late: 2 x inner_steps + 3 s of
// steps at this island's rate since its first step. An island past the cut when it learns of it marks the
// cut as not written by it (so nobody waits), and the run resumes from the checkpoint before.
void IslandProcess::follow_signal_cut(int64_t step) {
  if (rate_from_.second < 0) rate_from_ = {Clock::now(), step};
  const bool step_cuts = parts_.algorithm->checkpoint_cut() == algorithms::CheckpointCut::kStep;
  const bool on = config_.checkpoint.every > 0 && step_cuts;
  if (g_checkpoint_signal.exchange(false)) {
    if (!on) {
      ATOLL_WARN("island " << island_ << ": a signal asks for a checkpoint, but "
                           << (config_.checkpoint.every <= 0 ? std::string("checkpoint.every is 0 (checkpoints are off)")
                                                             : config_.algorithm.name + " cuts its checkpoints at server "
                                                                                        "interactions")
                           << "; ignored");
    } else {
      // Steps per second since this island's first step here (not since the process began:
      // joining and loading may take longer than the training so far).
      const double rate = static_cast<double>(step - rate_from_.second) /
                          std::max(1e-3, seconds_since(rate_from_.first));
      const int64_t cut = step + 2 * std::max<int64_t>(1, config_.algorithm.round_steps()) +
                          static_cast<int64_t>(std::ceil(rate * 3.0)) + 1;
      const std::string text = std::to_string(cut);
      if (Status st = client_->store_set(kCheckpointAskKey, {text.begin(), text.end()}); !st.is_ok())
        ATOLL_WARN("island " << island_ << ": " << st.to_string());
      ATOLL_INFO("island " << island_ << ": a signal asks for a checkpoint; proposed step " << cut);
      last_cut_poll_ = {};
    }
  }
  if (!on) return;
  int64_t cut = 0;
  if (Clock::now() - last_cut_poll_ >= std::chrono::seconds(1)) {
    last_cut_poll_ = Clock::now();
    auto got = client_->store_peek(kCheckpointCutKey);
    if (got.is_ok() && got.value()) {
      const std::vector<int64_t> s = parse_steps(std::string(got.value()->begin(), got.value()->end()));
      if (s.size() == 1) cut = s[0];
    }
  }
  if (ranks_ != nullptr) cut = static_cast<int64_t>(ranks_->broadcast_double(static_cast<double>(cut)));
  if (cut <= signal_cut_) return;
  signal_cut_ = cut;
  // Behind it: the others cut at the first boundary from `cut` on where the algorithm could
  // (not at `cut` itself while an exchange is in flight there), which this island passed. It
  // marks that cut as not written by it and waits until it is done, as at a cut: a joiner it
  // handed its state to meanwhile would take part in the cut without marking it.
  if (const int64_t passed = schedule_->add_cut(cut); passed > 0) {
    const std::string why = "island " + std::to_string(island_) + " was at step " + std::to_string(step) +
                            " when it learned of the cut";
    ATOLL_WARN("island " << island_ << ": the checkpoint asked at step " << cut << " (taken at step " << passed
                         << ") is behind it (" << why << ")");
    mark_cut(passed, why);
  }
}

void IslandProcess::hand_over() {
  bool now = donor_ && parts_.algorithm->can_hand_over();
  if (outer_shards_ && !outer_shards_->empty()) {
    // The ranks hold shards of the outer state: when a joiner waits, all of them put it
    // together first (the other ranks follow this flag: run_rank).
    now = ranks_->broadcast_flag(now && donor_->joiners_waiting());
    if (!now) return;
    outer_shards_->gather_all();
  }
  if (now) donor_->at_step_boundary();
  if (outer_shards_ && now) outer_shards_->release_all();
}

}  // namespace atl::run
