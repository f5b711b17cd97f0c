// `atoll coordinator`'s composition (docs/architecture.md "The run layer"): the
// CoordinatorProcess class, internal to src/run/coordinator_process.cpp (the run directory,
// the loop thread's hooks, the start, the watch loop, the end) and src/run/coordinator_cuts.cpp
// (the resume decision and the checkpoint cut: marks, the signal's cut, pick-up).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "compression/pipeline.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/config/config.h"
#include "src/run/process_checkpoint.h"
#include "src/run/processes.h"
#include "src/run/run_totals.h"
#include "src/run/start_gate.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/components.h"
#include "src/core/evaluator.h"
#include "src/core/run_dir.h"
#include "src/core/server_host.h"
#include "transport/zmq/coordinator.h"

namespace atl::run {

using Clock = std::chrono::steady_clock;

// The coordinator of one run. Its state in named parts: the records (metrics.jsonl, or the
// records held back until a resume decides where it is cut), the checkpoint marks, the start
// (src/run/start_gate.h), the server role (core::ServerHost). The transport::Coordinator's
// loop thread calls the hooks (records, store sets, membership, persist); the main thread
// runs watch(). Each part under its own mutex where both threads touch it.
class CoordinatorProcess {
 public:
  CoordinatorProcess(const config::Config& config, const ProcessOptions& options);
  int run();

 private:
  void open_run_dir();
  void find_skipped();
  void make_server();
  transport::CoordinatorOptions coordinator_options();
  // The loop thread's hooks.
  void sink(const std::string& json);
  void persist(const transport::CoordinatorSnapshot& snapshot);
  void on_store_set(int island, const std::string& key, std::span<const uint8_t> value);
  void on_membership(const transport::Membership& view, const std::vector<transport::MemberChange>& changes);
  void fail_run(const std::string& why);
  std::string failure();
  // The main thread's.
  void take_pickup();
  void watch();
  void decide(const transport::Membership& view);
  void announce(const StartDecision& d);
  void decide_resume();
  void cut_checkpoints(const transport::Membership& now);
  void announce_signal_cut();
  int finish();

  const config::Config& config_;
  const ProcessOptions& options_;
  const Clock::time_point t0_;
  const int k_;
  core::RunData data_;
  algorithms::AlgorithmOptions algo_options_;
  compression::Pipeline codec_;
  // --resume (docs/checkpoints.md "Real runs"): a run directory that exists continues from
  // the newest checkpoint that the coordinator and every island it lists hold; which one is
  // decided once the islands have said what they hold. Until then records are held back
  // (metrics.jsonl is cut at the checkpoint first).
  const std::string run_path_;
  const std::string ckpt_hash_;
  // The running state's config identity: resume_hash without the coordinator's own address,
  // so that a coordinator restarted elsewhere (islands that find it through the run directory
  // follow it there) picks the run up.
  const std::string pickup_hash_;
  checkpoint::CheckpointDir ckpts_;
  std::vector<CoordinatorCheckpoint> resumable_;
  bool resuming_ = false;
  // A coordinator restarted mid-run (docs/checkpoints.md "Coordinator restart") continues
  // metrics.jsonl from its saved running state, and the islands' records it had not saved
  // come again (they resend the newest after a reconnection).
  std::optional<CoordinatorRunState> pickup_;

  // The records.
  RunTotals totals_;
  std::mutex dir_mu_;  // guards dir_ and held_
  std::optional<core::RunDir> dir_;
  std::vector<std::string> held_;  // records that came before metrics.jsonl was cut (resuming)
  // A failure that ends the run (run.metrics_on_failure or checkpoint.on_failure: stop):
  // said at once, and watch() stops the run (docs/errors.md "Outputs").
  std::mutex failure_mu_;
  std::string run_failure_;

  // The checkpoint protocol's marks (island K wrote step S, or why not: core::CheckpointGathering)
  // and the islands' --resume lists.
  std::mutex marks_mu_;
  core::CheckpointGathering gathering_;
  std::map<int, std::vector<int64_t>> have_;
  std::set<int> finished_;  // islands that have finished their steps (finished_key)
  // Checkpoints: the counts for summary.json (a cut is written when the coordinator's file and
  // every island's are).
  int64_t checkpoints_asked_ = 0, checkpoints_written_ = 0;
  // Why an island could not write a final parameter file ("" while none failed).
  std::string final_params_failure_;
  // The server role's state and latest round as last persisted (on the loop thread, after
  // every change): what a checkpoint cut holds (every island waits at the cut meanwhile).
  std::pair<int64_t, transport::OuterServer::State> latest_server_;
  // Picked up: a checkpoint the previous coordinator had not finished is skipped (the
  // records of its islands may still be on their way back, so no cut is made there): its
  // islands are released, and marks up to it are ignored (given up in gathering_).
  std::vector<int64_t> skipped_;
  // A checkpoint asked by a signal: proposed (kCheckpointAskKey, by island asked_by_), then
  // announced and pending until cut (under marks_mu_).
  int64_t asked_cut_ = 0, signal_cut_ = 0;
  int asked_by_ = -1;

  // The server role (fedavg, async_local_sgd, core::ServerHost): it holds the global model,
  // so it is evaluated here.
  std::unique_ptr<core::Evaluator> evaluator_;
  std::unique_ptr<core::ServerHost> server_;
  // Islands seen joining: one that joins again after it left or failed is `rejoined`.
  std::set<int> seen_;

  // The start (src/run/start_gate.h): decided here, announced through the store.
  JoinView joins_;
  Clock::time_point join_deadline_;
  std::set<int> ever_joined_;
  size_t refused_seen_ = 0;
  std::optional<StartDecision> decision_;
  std::optional<Clock::time_point> failed_at_;
  // --resume: after the start decision, the checkpoint to resume from (decide_resume).
  std::optional<StartDecision> awaiting_resume_;
  // When a failed start first became certain while islands were still expected.
  std::optional<Clock::time_point> certain_since_;
  // Islands whose process exited, as the supervisor reported them (launch --supervised).
  std::map<int, std::string> exited_;

  std::unique_ptr<transport::Coordinator> coordinator_;  // last: its hooks use the above
};

}  // namespace atl::run
