// The coordinator's resume decision and checkpoint cut (docs/checkpoints.md "Gathering",
// "Real runs", "A checkpoint on a signal", "Coordinator restart"): which checkpoint a resumed
// run starts from, the cuts completed from the islands' marks (core::CheckpointGathering), the
// cut a signal asks for, and what a restarted coordinator picks up.
#include <algorithm>
#include <fstream>

#include "src/base/log.h"
#include "src/run/coordinator_process.h"

namespace atl::run {

void CoordinatorProcess::find_skipped() {
  if (!pickup_) return;
  const auto& store = pickup_->snapshot.store;
  int64_t newest = -1;  // the newest cut given up here or completed by the previous coordinator
  for (const auto& [key, value] : store) {
    const int64_t step = checkpoint_key_step(key);
    if (step < 0) continue;
    newest = std::max(newest, step);
    if (!store.count(checkpoint_done_key(step)) && std::find(skipped_.begin(), skipped_.end(), step) == skipped_.end())
      skipped_.push_back(step);  // once, whichever islands marked it
  }
  // Marks up to it (an island's mark sent again after the restart) are ignored.
  if (newest >= 0) gathering_.give_up(newest);
}


// Picks the checkpoint once every island of the start set has said what it holds (or the join
// timeout has passed), cuts metrics.jsonl there and announces it before the start.
void CoordinatorProcess::decide_resume() {
  std::map<int, std::vector<int64_t>> lists;
  {
    std::lock_guard<std::mutex> lock(marks_mu_);
    lists = have_;
  }
  bool all = true;
  for (int id : awaiting_resume_->islands) all = all && lists.count(id);
  if (!all && Clock::now() < join_deadline_) return;
  StartDecision d = *awaiting_resume_;
  awaiting_resume_.reset();
  std::string why;
  const std::optional<ResumePoint> point = resume_step(resumable_, lists, &why);
  if (!point) {
    d.start = false;
    d.islands.clear();
    d.why = "run.resume: no checkpoint that the coordinator and every island hold (" + why + ")";
    return announce(d);
  }
  const CoordinatorCheckpoint& at = *std::find_if(resumable_.begin(), resumable_.end(),
                                                  [&](const CoordinatorCheckpoint& c) { return c.step == point->step; });
  // The server role as it was at the cut (fedavg); the islands pull from it once started.
  // Before the run directory is set: the loop thread's persist reads the server only after.
  if (server_ && at.has_server) server_->load(at.server, at.server_round);
  {
    std::lock_guard<std::mutex> lock(dir_mu_);
    dir_.emplace(config_, core::RunDir::Continue{at.metrics_bytes});
    // summary.json counts every record of the run: those before the cut first.
    std::ifstream in(dir_->path() + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) totals_.add(line);
    for (const std::string& json : held_) {
      std::string routed;
      try {
        if (totals_.add(json, &routed)) dir_->record(json);
        if (!routed.empty() && totals_.add(routed)) dir_->record(routed);
      } catch (const core::OutputError& e) {  // run.metrics_on_failure: stop
        fail_run(e.what());
      }
    }
    held_.clear();
  }
  // Islands of the start set the checkpoint does not list come in as rejoiners do (dead at
  // the cut), or run nothing (finished before it: fedavg clients whose plan had ended); the
  // others resume.
  d.islands = point->members;
  const std::string done = steps_text({at.finished.begin(), at.finished.end()});
  coordinator_->store_set(kFinishedKey, {done.begin(), done.end()});
  {
    std::lock_guard<std::mutex> lock(marks_mu_);
    finished_.insert(at.finished.begin(), at.finished.end());  // later cuts list them too
  }
  ATOLL_INFO("coordinator: resuming after step " << point->step << " (islands "
                                                 << steps_text({d.islands.begin(), d.islands.end()}) << ")");
  const std::string value = "step:" + std::to_string(point->step);
  coordinator_->store_set(kResumeKey, {value.begin(), value.end()});
  announce(d);
}

// A checkpoint asked by a signal (docs/checkpoints.md "A checkpoint on a signal"): the step an
// island proposed becomes every island's extra cut.
void CoordinatorProcess::announce_signal_cut() {
  int64_t cut = 0;
  int by = -1;
  {
    std::lock_guard<std::mutex> lock(marks_mu_);
    if (asked_cut_ == 0) return;
    cut = signal_cut_ = asked_cut_;
    by = asked_by_;
    asked_cut_ = 0;
  }
  const std::string text = std::to_string(cut);
  coordinator_->store_set(kCheckpointCutKey, {text.begin(), text.end()});
  ATOLL_INFO("coordinator: island " << by << " received a signal to checkpoint; every island cuts at step " << cut);
}

// A checkpoint is complete when every island that takes part has marked it: the records up to
// it are all in metrics.jsonl (each island marked after them, on the same connection) and
// none after it (each waits until the coordinator has written its file).
void CoordinatorProcess::cut_checkpoints(const transport::Membership& now) {
  const std::vector<int> taking_part = transport::collective_members(now);
  std::lock_guard<std::mutex> lock(marks_mu_);
  for (const core::CheckpointGathering::Cut& cut : gathering_.complete(taking_part)) {
    if (!cut.skipped.empty()) {  // (no skip hooks here today; a cut skipped is released unwritten)
      ATOLL_WARN("coordinator: checkpoint of step " << cut.step << " skipped: " << cut.skipped);
      coordinator_->store_set(checkpoint_done_key(cut.step), {1});
      continue;
    }
    CoordinatorCheckpoint c;
    c.step = cut.step;
    c.config_hash = ckpt_hash_;
    c.islands = k_;
    c.epoch = now.epoch;
    c.members = taking_part;
    for (int id : finished_)
      if (!std::binary_search(taking_part.begin(), taking_part.end(), id)) c.finished.push_back(id);
    if (server_) {
      c.has_server = true;
      std::tie(c.server_round, c.server) = latest_server_;
    }
    {
      std::lock_guard<std::mutex> dlock(dir_mu_);
      c.metrics_bytes = dir_->metrics_bytes();
    }
    ++checkpoints_asked_;
    std::string not_written;
    if (Status st = ckpts_.save(cut.step, encode_coordinator(c)); !st.is_ok())
      not_written = "the coordinator's: " + st.to_string();
    for (const auto& [id, why] : cut.failures)
      not_written += (not_written.empty() ? "" : "; ") + ("island " + std::to_string(id) + "'s: " + why);
    if (not_written.empty()) {
      ++checkpoints_written_;
    } else if (config_.checkpoint.on_failure == "stop") {
      fail_run("checkpoint of step " + std::to_string(cut.step) + " not written (" + not_written +
               "); the run stops (checkpoint.on_failure: stop)");
    } else {
      ATOLL_WARN("coordinator: checkpoint of step " << cut.step << " not written (" << not_written << ")");
    }
    coordinator_->store_set(checkpoint_done_key(cut.step), {1});
    if (signal_cut_ > 0 && cut.step >= signal_cut_) signal_cut_ = 0;  // another signal may ask again
  }
}

// The run as the previous coordinator left it: its start decision and the islands seen; a
// checkpoint it had not finished is skipped.
void CoordinatorProcess::take_pickup() {
  const auto& store = pickup_->snapshot.store;
  if (auto it = store.find(kRunStartKey); it != store.end()) {
    auto d = parse_start(it->second);
    if (d.is_ok()) decision_ = d.value();
  }
  for (const auto& m : pickup_->snapshot.members) {
    ever_joined_.insert(m.id);
    seen_.insert(m.id);
  }
  {
    std::lock_guard<std::mutex> lock(marks_mu_);  // the loop thread's on_store_set runs already
    for (int id = 0; id < k_; ++id)
      if (store.count(finished_key(id))) finished_.insert(id);
    if (auto it = store.find(kFinalParamsFailedKey); it != store.end() && final_params_failure_.empty())
      final_params_failure_ = std::string(it->second.begin(), it->second.end());
  }
  for (int64_t step : skipped_) {
    ATOLL_WARN("coordinator: the checkpoint of step " << step << " was not finished before the restart; skipped");
    coordinator_->store_set(checkpoint_done_key(step), {1});
  }
}

}  // namespace atl::run
