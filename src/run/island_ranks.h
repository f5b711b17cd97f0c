// The ranks of one island in a real run (islands.ranks > 1; docs/ranks.md).
//
// An island of R ranks is R processes (`atoll island CONFIG --id K --rank r`) that talk over
// libtorch's own c10d: a TCPStore served by rank 0 and a ProcessGroupGloo. Every rank holds
// the whole model and runs the same island loop:
//   - inner steps are data parallel: each rank computes its rows of every batch
//     (core::RankShare) and the island averages the gradient with one all-reduce;
//   - rank 0 is the island's voice in the run: it joins the coordinator, takes part in the
//     islands' exchanges, writes records, evaluations and checkpoints;
//   - the other ranks are its replicas: every input rank 0's algorithm observes from outside
//     (a collective's result and its completion, the membership view, the clock) reaches them
//     by a broadcast at the point where it is observed (MirroredGroup, MirroredTime), so that
//     the same algorithm code on every rank takes the same decisions and holds bitwise the
//     same state;
//   - an island that resumes or rejoins: rank 0 sends the others the checkpoint or the
//     hand-over it starts from (IslandStart), and each applies it as rank 0 does.
// A rank that dies ends its island: the others' next c10d operation fails (a closed
// connection), or times out after transport.rank_timeout_s.
//
// Threads: everything here is used by the island's main thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/outer_optimizer.h"
#include "src/base/status.h"
#include "src/config/config.h"
#include "transport/group.h"

namespace c10d {
class ProcessGroupGloo;
class Store;
}  // namespace c10d

namespace atl::run {

struct RankPlace {
  int island = 0;
  int rank = 0;
  int ranks = 1;
  std::string rank0_host;  // where rank 0 serves the island's c10d store
  int port = 0;            // the store's port
  std::string bind_host;   // this rank's address for the process group's connections
};

class IslandRanks {
 public:
  // Rendezvous of the island's ranks: returns once all have joined. kTimeout when they do
  // not within `join_timeout`; `op_timeout` bounds every later operation.
  static StatusOr<std::unique_ptr<IslandRanks>> connect(const RankPlace& place, std::chrono::milliseconds join_timeout,
                                                         std::chrono::milliseconds op_timeout);
  ~IslandRanks();

  int rank() const { return place_.rank; }
  int ranks() const { return place_.ranks; }
  bool leads() const { return place_.rank == 0; }
  // Where the island's c10d store is (rank 0's host and port): other threads open their own
  // client of it (src/run/shard_plane.h).
  const RankPlace& place() const { return place_; }

  // grads <- (sum over the ranks of grads) / ranks; returns the mean of the ranks' losses.
  double average(at::Tensor& grads, double loss);
  // Rank `root`'s `t` (same shape and dtype on every rank; contiguous) into every rank's `t`.
  void broadcast(at::Tensor& t, int root = 0);
  // Rank `root`'s bytes to every rank (the others' argument is ignored).
  std::vector<uint8_t> broadcast_bytes(std::vector<uint8_t> bytes, int root = 0);
  // Rank `root`'s `v` on every rank.
  uint64_t broadcast_count(uint64_t v, int root = 0);
  // Whether `v` holds on every rank.
  bool all(bool v);
  // `t` (int64) <- its sum over the ranks.
  void sum(at::Tensor& t);
  double broadcast_double(double v);
  bool broadcast_flag(bool v);
  // After the island's last step, on every rank: kInternal on every rank when any rank's
  // `params` are not bitwise rank 0's (the replicas diverged: a defect, never a WAN outcome).
  Status check_replica(const at::Tensor& params);

 private:
  explicit IslandRanks(RankPlace place) : place_(std::move(place)) {}
  template <class Op>
  void c10d(const char* what, Op&& op);
  RankPlace place_;
  std::shared_ptr<c10d::Store> store_;
  std::shared_ptr<c10d::ProcessGroupGloo> group_;
};

// A rank > 0's part in its island's run, start to end (src/run/island_rank.cpp); rank 0 is
// the island process (src/run/island_process.cpp), which it follows.
// `routes`: where its shard plane dials each peer's (launch --emulate-wan; empty: where they bound).
Status run_rank(const config::Config& config, int island, IslandRanks& ranks,
                const std::map<int, std::string>& routes = {});

// What rank 0 starts from, sent to the other ranks before the island's algorithm is set up.
struct IslandStart {
  enum Kind : uint8_t { kFresh = 0, kResume = 1, kJoin = 2, kNothing = 3 };
  Kind kind = kFresh;
  std::vector<uint8_t> payload;  // kResume: the island checkpoint file's bytes; kJoin: the hand-over's
};
IslandStart broadcast_start(IslandRanks& ranks, IslandStart start);

// This rank's part in the outer exchange sharded over the island's ranks
// (islands.shard_exchange; src/run/shard_plane.h, transport/shards.h).
struct RankShard {
  // Where this rank's shard travels: on rank 0 the island's group, on rank r its ShardPlane's.
  transport::Group* group = nullptr;
  // Rank 0: its membership epoch now. Ranks > 0: their plane's counters, and its catch-up to
  // rank 0's epoch (ShardPlane::catch_up) before each of their collectives.
  std::function<uint64_t()> epoch;
  std::function<transport::ByteCounters()> bytes;
  std::function<void(uint64_t)> catch_up;
  // Rank 0: takes the seconds each sharded exchange's wait blocked (its round records' sync_s;
  // its shard groups do not count their own). Empty on the other ranks.
  std::function<void(double)> blocked;
  // Rank 0: the sum of the other ranks' shard planes' counters, as of the latest sharded
  // all-reduce that completed (the island's records count them with its own).
  transport::ByteCounters others;
  // This rank's shard group of the algorithm's sub-group `sub` (transport::sharded_subgroup:
  // a modular model's modules), keyed transport::shard_key(rank, R, sub): on rank 0 a sub-group of the
  // island's group, on rank r one of its ShardPlane's.
  std::function<std::unique_ptr<transport::Group>(uint32_t key, std::vector<int> ids)> subgroup;
  // The sequence number of each rank's next shard collective, by rank (every rank counts
  // every shard's: the ranks post and rerun them alike), of the island's group and of each
  // sharded sub-group. Set from where the island starts (a checkpoint, a hand-over); rank 0
  // saves them there (put_shard_seqs).
  struct Seqs {
    std::vector<uint64_t> group;
    std::map<uint32_t, std::vector<uint64_t>> subs;  // by the algorithm's sub-group key
  } seqs;
  int64_t exchanges = 0;  // sharded exchanges posted by this process
};
// The shards' sequence numbers as a checkpoint or hand-over holds them: rank r >= 1's under
// transport::shard_key(r, R) (the group's) and shard_key(r, R, sub) (a sub-group's) in
// `keyed`; and back (0 where absent), removing them. `first_seqs` gives rank r's plane the
// first sequence numbers of its sub-groups.
void put_shard_seqs(const RankShard::Seqs& seqs, std::map<uint32_t, uint64_t>& keyed);
RankShard::Seqs take_shard_seqs(std::map<uint32_t, uint64_t>& keyed, int ranks);
std::map<uint32_t, uint64_t> first_seqs(const RankShard::Seqs& seqs, int rank);

// The group the algorithm of an island of several ranks talks through (see above). On rank 0
// it wraps the island's group; on the others `inner` is null and every answer is rank 0's.
// With `shard`, an allreduce_mean that transport::shard_ranges() cuts runs as one shard per
// rank, each on its rank's shard group, and the ranks then share the shards over c10d.
std::unique_ptr<transport::Group> mirrored_group(IslandRanks& ranks, transport::Group* inner, int island,
                                                 RankShard* shard = nullptr);
// Where the ranks of an island with a sharded exchange keep their shards of the outer
// optimizers' state (algorithms/outer_optimizer.h): share() broadcasts each rank's shard from
// it over c10d. Every rank calls gather_all() at each checkpoint cut and before each hand-over
// (rank 0 then saves the whole state), after the exchange in flight there completed.
std::unique_ptr<algorithms::OuterShards> rank_outer_shards(IslandRanks& ranks);
// Logs the outer state `who` holds, of the island's whole (OuterShards::values_held).
void log_outer_state(const algorithms::OuterShards& shards, const std::string& who);

// The algorithm's clock: rank 0's readings of `inner` on every rank (`inner` unused elsewhere).
std::unique_ptr<algorithms::TimeSource> mirrored_time(IslandRanks& ranks, algorithms::TimeSource* inner);

}  // namespace atl::run
