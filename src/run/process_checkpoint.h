// The checkpoints of a real run (docs/checkpoints.md "Real runs"): each island process writes
// its own file of step S into runs/<name>/checkpoints/island-K/, the coordinator its own into
// runs/<name>/checkpoints/coordinator/ once every island that takes part has written S. This
// file is the one reader and writer of their sections, and picks the step a whole run
// resumes from (resume_step()).
//
// The island's sections are built from the layouts both modes share (src/core/sim_checkpoint.h:
// "run", "global", the island's training state), so `atoll export --checkpoint` reads an
// island's file as it reads a simulator's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/base/status.h"
#include "src/checkpoint/checkpoint_file.h"
#include "src/config/config.h"
#include "src/core/island_runtime.h"
#include "src/core/sim_checkpoint.h"
#include "src/data/dataset.h"
#include "transport/group.h"
#include "transport/zmq/coordinator.h"

namespace atl::run {

// Store keys of the checkpoint and resume protocol (docs/protocol.md "Checkpoints").
// Island K has reached checkpoint S (set after its records up to S, on the same connection).
// Its value is empty when K's file was written, else why it was not (one line).
std::string checkpoint_mark_key(int64_t step, int island);
// The coordinator has written checkpoint S: the islands waiting at S go on.
std::string checkpoint_done_key(int64_t step);
// S of a key of checkpoint S (a mark or the done key); -1 for any other key.
int64_t checkpoint_key_step(const std::string& key);
// A checkpoint asked by a signal (docs/checkpoints.md "A checkpoint on a signal"): an island
// that received SIGUSR1 proposes the step to cut at (decimal); the coordinator copies the
// first proposal it sees while none is pending to kCheckpointCutKey, which every island
// polls and adds to its schedule.
inline constexpr char kCheckpointAskKey[] = "atoll/signal/ask";
inline constexpr char kCheckpointCutKey[] = "atoll/signal/cut";
// --resume: the steps of the checkpoints island K holds whole, newest first ("40,30,20").
std::string resume_have_key(int island);
// --resume: the coordinator's decision, "fresh" or "step:S"; set before atoll/run/start.
inline constexpr char kResumeKey[] = "atoll/run/resume";
// --resume: the islands that had finished before the checkpoint resumed from ("0,2"; fedavg
// clients whose plan ended before the cut): they run nothing again. Set before kResumeKey.
inline constexpr char kFinishedKey[] = "atoll/run/finished";
// Island K has finished its steps (set after its island_end record, on the same connection).
std::string finished_key(int island);
// Set by the island that wrote final_params.bin (several paths: "<key>/pathP" for each path's file).
inline constexpr char kFinalParamsKey[] = "atoll/run/final_params";
// Set by an island that could not write a final parameter file, to why (one line): the
// coordinator's summary.json says the run failed, and why.
inline constexpr char kFinalParamsFailedKey[] = "atoll/run/final_params_failed";

// Where the processes of `config` keep their checkpoints.
std::string checkpoints_root(const config::Config& config);  // checkpoint.dir or runs/<name>/checkpoints
std::string island_checkpoint_dir(const config::Config& config, int island);
std::string coordinator_checkpoint_dir(const config::Config& config);

// One island at the step boundary S of a checkpoint.
// Its training state (params, inner optimizer, sampler, algorithm, runtime counters) is
// core::IslandTraining, saved and restored as in the simulator (src/core/sim_checkpoint.h).
struct IslandProcessCheckpoint : core::IslandTraining {
  int64_t step = 0;
  std::string config_hash;       // core::resume_hash(config)
  int island = -1;
  int islands = 0;               // islands.count
  at::Tensor global;             // [N] float32: the island's global model
  transport::ByteCounters bytes;  // the island's data-plane counters (eval and island_end records)
  at::Tensor torch_rng;          // libtorch's default CPU generator, uint8 state
  // The data plane's next sequence number of each group by key (0: every island; else a
  // sub-group of the algorithm's): the resumed group continues the numbering (lossy direct-exchange
  // seeds depend on it).
  std::map<uint32_t, uint64_t> group_seqs;
  // The result of the exchange in flight at S (Algorithm::wait_in_flight: diloco with
  // overlap), handed back by the resumed group's resume_in_flight(); section "inflight".
  std::optional<transport::CollectiveResult> in_flight;
};

// The coordinator at checkpoint S: every island of `members` had written S.
struct CoordinatorCheckpoint {
  int64_t step = 0;
  uint64_t metrics_bytes = 0;    // metrics.jsonl's length at the cut
  std::string config_hash;
  int islands = 0;
  uint64_t epoch = 0;            // membership epoch at the cut
  std::vector<int> members;      // ascending
  std::vector<int> finished;     // islands that had finished before the cut (ascending)
  // The server role (fedavg) at the cut: its state and the latest round it reported.
  bool has_server = false;
  int64_t server_round = 0;
  transport::OuterServer::State server;
};

// The coordinator's running state (docs/checkpoints.md "Coordinator restart"), saved while
// the run goes on and read by a coordinator restarted mid-run: the transport's snapshot and
// metrics.jsonl's length when it was taken.
struct CoordinatorRunState {
  uint64_t metrics_bytes = 0;
  std::string config_hash;
  int islands = 0;
  transport::CoordinatorSnapshot snapshot;
  // The server role (fedavg, async_local_sgd): its state and the latest round it reported.
  bool has_server = false;
  int64_t server_round = 0;
  transport::OuterServer::State server;
};
// Its file: <checkpoints_root>/coordinator/run-state.ckpt.
std::string coordinator_state_path(const config::Config& config);
std::vector<checkpoint::Section> encode_run_state(const CoordinatorRunState& s);
StatusOr<CoordinatorRunState> decode_run_state(const checkpoint::Checkpoint& file, const std::string& what);

std::vector<checkpoint::Section> encode_island(const IslandProcessCheckpoint& c);
StatusOr<IslandProcessCheckpoint> decode_island(const checkpoint::Checkpoint& file, const std::string& what);
// A resumed island's training state (core::restore_training, as in every resume) and
// libtorch's generator (dropout), on every rank of the island.
void restore_island(core::IslandParts& parts, core::IslandRuntime& runtime, const IslandProcessCheckpoint& c);
std::vector<checkpoint::Section> encode_coordinator(const CoordinatorCheckpoint& c);
StatusOr<CoordinatorCheckpoint> decode_coordinator(const checkpoint::Checkpoint& file, const std::string& what);

// The checkpoints of island `island` in `dir` that read back whole, decode, and belong to
// `config_hash`, newest first; each one that does not is reported through `refused` with
// one line ending in "; falling back to the previous checkpoint".
std::vector<int64_t> usable_island_steps(const std::string& dir, const std::string& config_hash, int island,
                                         const std::function<void(const std::string&)>& refused);
// The same for the coordinator's checkpoints, decoded.
std::vector<CoordinatorCheckpoint> usable_coordinator_checkpoints(
    const std::string& dir, const std::string& config_hash, const std::function<void(const std::string&)>& refused);

// The step a whole run resumes from: the newest coordinator checkpoint (`coordinator`, newest
// first, each with the islands it lists) whose every island holds that step (`have`: island
// -> its usable steps). nullopt when there is none; `why` then says which island lacks what.
struct ResumePoint {
  int64_t step = 0;
  std::vector<int> members;
};
std::optional<ResumePoint> resume_step(const std::vector<CoordinatorCheckpoint>& coordinator,
                                       const std::map<int, std::vector<int64_t>>& have, std::string* why);

// "40,30,20" <-> {40, 30, 20}. Parsing skips nothing: a malformed list is empty.
std::string steps_text(const std::vector<int64_t>& steps);
std::vector<int64_t> parse_steps(const std::string& text);

}  // namespace atl::run
