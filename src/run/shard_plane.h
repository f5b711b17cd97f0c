// The outer exchange sharded over an island's ranks in a real run (islands.shard_exchange;
// docs/ranks.md "The outer exchange, sharded"): rank r of every island all-reduces shard r
// of each outer buffer with the other islands' ranks r.
//   - Rank 0 carries shard 0 on the island's own data plane; rank r >= 1 carries shard r on a
//     ZeroMQ data plane of its own (ShardPlane), bound to an ephemeral port.
//   - Rank 0 stays the island's only control-plane client. Every island's rank 0 publishes
//     its ranks' shard endpoints in the coordinator's store (ShardDirectory::publish) before
//     its own data endpoint. Its ShardViews thread writes its membership view, with every
//     member's shard endpoints, into the island's c10d store at every change, where the other
//     ranks' shard planes read it (every poll_ms, as rank 0's data plane reads its control
//     client's), so a shard plane has no failure detector of its own and learns of members
//     (and their CURVE keys) as soon as rank 0's data plane does.
//
// Threads: ShardDirectory::publish on rank 0's main thread, then view() on its ShardViews
// thread only; a ShardPlane by its rank's main thread, its control plane by its data plane's
// I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "transport/control_plane.h"
#include "transport/group.h"
#include "transport/server_link.h"

namespace atl::run {

struct RankPlace;

// Fault injection for tests (docs/ranks.md "The outer exchange, sharded"), from the
// environment's ATOLL_SHARD_FAULT (unset or malformed: none):
//   - rerun:N:S — every island runs shard S of its N-th sharded all-reduce (from 1) again,
//     once, as if a member had been lost between the shards;
//   - slow_views:MS — rank 0 writes each membership view for its ranks MS ms late, so that
//     their planes lag behind its own (they catch up before each collective).
struct ShardFault {
  int64_t rerun_exchange = 0;
  int rerun_shard = -1;
  int slow_views_ms = 0;
};
const ShardFault& shard_fault();

// Rank 0's side: the shard endpoints of every member, from the coordinator's store.
class ShardDirectory {
 public:
  ShardDirectory(transport::ControlPlane& control, int ranks) : control_(control), ranks_(ranks) {}
  // This island's ranks 1..R-1 endpoints, before its own data endpoint is published.
  Status publish(int island, const std::vector<std::string>& endpoints);
  // Rank 0's membership with every member's shard endpoints, encoded for the other ranks;
  // `complete` false when a member's could not be read (they go empty: it takes no part).
  std::vector<uint8_t> view(bool* complete = nullptr);

 private:
  transport::ControlPlane& control_;
  const int ranks_;
  // Per member: its shard endpoints, as read in membership epoch epoch_.
  std::map<int, std::vector<std::string>> known_;
  uint64_t epoch_ = 0;
};

// Rank 0's thread that writes the directory's view into the island's c10d store (at `place`)
// whenever the membership changes, until destroyed.
class ShardViews {
 public:
  ShardViews(ShardDirectory& directory, transport::ControlPlane& control, const RankPlace& place);
  ~ShardViews();

 private:
  struct Thread;
  std::unique_ptr<Thread> thread_;
};

// A rank r >= 1's data plane for shard r, over the views rank 0 sends.
class ShardPlane {
 public:
  // `first_seq`: its first collective (a run resumed from a checkpoint: where it was), and
  // `first_seqs` its sub-groups' (by key); `place`: where the island's c10d store is (rank
  // 0's views); `routes`: peers to dial elsewhere than where they bound (launch
  // --emulate-wan's relays; the plane then binds shard_plane_port, src/run/wan.h).
  ShardPlane(const config::Config& config, const RankPlace& place, uint64_t first_seq = 0,
             std::map<uint32_t, uint64_t> first_seqs = {}, std::map<int, std::string> routes = {});
  ~ShardPlane();
  transport::Group& group();
  // Where the other islands' ranks r reach it.
  const std::string& endpoint() const { return published_; }
  transport::ByteCounters bytes() const;
  // Before a collective: until it has read rank 0's view of `epoch` (rank 0's when the
  // collective starts there) or later, so that it starts among the members rank 0's does.
  void catch_up(uint64_t epoch);

 private:
  class Control;
  std::unique_ptr<Control> control_;
  std::unique_ptr<transport::NetGroup> plane_;
  std::string published_;
};

}  // namespace atl::run
