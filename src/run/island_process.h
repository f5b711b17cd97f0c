// One life of an island process in a real run (`atoll island`; docs/architecture.md "The run
// layer"): the IslandProcess composition, internal to src/run/island_process.cpp (joining,
// the start, the data plane, the runtime, training, the outputs) and src/run/island_cuts.cpp
// (the checkpoint it resumes from, its checkpoint cuts, signal cuts and hand-overs to joiners).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/base/status.h"
#include "src/checkpoint/checkpoint_dir.h"
#include "src/config/config.h"
#include "src/run/handover.h"
#include "src/run/island_ranks.h"
#include "src/run/process_checkpoint.h"
#include "src/run/processes.h"
#include "src/run/shard_plane.h"
#include "src/run/wan_routes.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/components.h"
#include "src/core/island_parts.h"
#include "src/core/island_runtime.h"
#include "src/core/progress.h"
#include "src/core/roles.h"
#include "src/core/wall_time.h"
#include "transport/zmq/control_client.h"

namespace atl::run {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// SIGUSR1 (Slurm's --signal=USR1@N before a job's time limit): rank 0 of an island asks the
// run for a checkpoint soon (IslandProcess::follow_signal_cut; docs/checkpoints.md "A
// checkpoint on a signal"); the other ranks ignore it. Clears a signal received before.
void arm_checkpoint_signal(bool rank0);

// How one life of an island in the run ended: it ran all its steps, or it was declared dead
// while cut off and came back into a run that went on without it, and is to join again
// (with a state hand-over).
enum class IslandEnd { kFinished, kJoinAgain };

// Prefixes "island K: " to a failure's message.
inline Status failed(int island, const Status& st, const std::string& what = "") {
  return Status(st.code(), "island " + std::to_string(island) + ": " + what + st.message());
}

// One life of island `island` in the run. Expected failures (the coordinator cannot be
// reached, nobody can hand the state over, the islands do not all join) are returned;
// user errors throw atl::UserError; a failure of the run itself mid-way throws. Its stages,
// in order: join the coordinator, learn how the run starts (with this island, resumed, or
// already going), the state it starts from (a checkpoint or a hand-over), the data plane,
// the runtime, the training and the outputs. Used by the main thread only.
class IslandProcess {
 public:
  // `ranks`: the island's ranks when it has several (this is rank 0), else null.
  IslandProcess(const config::Config& config, int island, const ProcessOptions& options, IslandRanks* ranks = nullptr);
  StatusOr<IslandEnd> run();

 private:
  Status join();
  // How the run starts for this island: false when it has nothing to run (a fedavg client
  // that had finished before the checkpoint resumed from).
  StatusOr<bool> decide_start();
  Status load_resume_point();
  Status fetch_state();
  // An island of several ranks: tells the others how it starts (src/run/island_ranks.h).
  void tell_ranks(IslandStart::Kind kind);
  Status start_data_plane();
  Status publish_shards();
  Status wait_for_start_set();
  core::IslandHost make_host();
  void make_runtime();
  StatusOr<IslandEnd> train();
  void write_outputs();
  void checkpoint_at(int64_t step);
  void mark_cut(int64_t step, const std::string& not_written);
  void at_boundary(int64_t step, int64_t total) {
    // The checkpoints due at the boundary after `step` (of `total`), by the rule both modes
    // share (core::CheckpointSchedule; fedavg: every cut up to the round this client pulls
    // next, at the boundary where that pull is its next action; the file of cut c is step-c).
    for (int64_t cut : schedule_->take_due(*parts_.algorithm, step, total)) checkpoint_at(cut);
  }
  // At each step boundary, after the due checkpoints: the state handed to joiners that wait.
  void hand_over();
  // At each step boundary, before the due checkpoints: a signal's ask, and the cut the run
  // agreed on (polled at most once a second) added to the schedule.
  void follow_signal_cut(int64_t step);
  Status in_run() const;
  bool in_store(const std::string& key);
  std::vector<int> running() const;
  Status failed(const Status& st, const std::string& what = "") const { return ::atl::run::failed(island_, st, what); }

  const config::Config& config_;
  const int island_;
  const ProcessOptions& options_;
  const Clock::time_point t0_;
  const int k_;
  Clock::duration join_timeout_{};
  core::RunData data_;
  algorithms::AlgorithmOptions algo_options_;
  compression::Pipeline codec_;
  core::IslandParts parts_;
  // Any island may have to evaluate: the lead's role moves when it dies.
  std::unique_ptr<core::Evaluator> evaluator_;
  transport::ControlClientOptions cc_;
  std::unique_ptr<transport::ZmqControlClient> client_;
  uint64_t join_epoch_ = 0;
  // With launch --emulate-wan, peers are dialled through the relays of this island's links.
  std::optional<PeerRoutes> control_;
  bool started_ = false;  // the run was going when this island joined
  bool late_ = false;     // it comes into a run that started without it
  const std::string ckpt_hash_;
  checkpoint::CheckpointDir ckpt_dir_;
  std::vector<int> start_set_;
  // Who leads and who hands state over, on this island's view: the members that take part in
  // collectives.
  const core::Roles roles_;
  std::optional<IslandProcessCheckpoint> resumed_;  // the checkpoint this island resumes from
  std::optional<Handover> handover_;                // the state a rejoiner starts from
  std::unique_ptr<transport::NetGroup> data_plane_;
  // Round records' sync_s is the wall time blocked in the exchange.
  std::optional<WatchedGroup> timed_;
  // islands.shard_exchange: the shard endpoints of every member, and this rank's shard (its
  // handles in the algorithm's hands: before release_algorithm_).
  std::optional<ShardDirectory> shard_dir_;
  std::optional<ShardViews> shard_views_;
  RankShard rank_shard_;
  std::unique_ptr<transport::Group> shard0_;
  // ... and its shards of the outer optimizers' state (enrolled optimizers: before
  // release_algorithm_).
  std::unique_ptr<algorithms::OuterShards> outer_shards_;
  // The algorithm's sub-groups use the group, its control plane and routes: the
  // algorithm goes before them, whichever way the process is left.
  struct ReleaseAlgorithm {
    core::IslandParts& parts;
    ~ReleaseAlgorithm() { parts.algorithm.reset(); }
  } release_algorithm_{parts_};
  core::Progress progress_;
  core::ProgressState state_;
  core::WallTime wall_time_;
  std::optional<HandoverDonor> donor_;
  std::optional<core::CheckpointSchedule> schedule_;
  Clock::time_point last_cut_poll_{};
  std::pair<Clock::time_point, int64_t> rate_from_{{}, -1};  // when, and at which step, it first trained
  int64_t signal_cut_ = 0;  // the newest signal cut taken up
  // An island of several ranks: the algorithm's group and clock, mirrored to the other ranks.
  IslandRanks* ranks_ = nullptr;
  std::unique_ptr<transport::Group> mirrored_;
  std::unique_ptr<algorithms::TimeSource> mirrored_time_;
  std::unique_ptr<core::IslandRuntime> runtime_;
};

}  // namespace atl::run
