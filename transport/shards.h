// The outer exchange sharded over an island's ranks (islands.shard_exchange; docs/ranks.md
// "The outer exchange, sharded"): an all-reduce of n values is cut into S shards, shard s
// all-reduced on its own, by rank s of every island. Written once for both modes:
//   - shard_ranges(): where the shards of a buffer fall (every island and every rank computes
//     the same from n and S);
//   - shard_key(): the sub-group key that carries shard s of S. In the simulator every shard is
//     a sub-group of the island's group on the hub (which times the S shards' messages as
//     sharing their links: shard_streams()); in a real run shard 0 is that sub-group of rank 0's
//     data plane and shard s >= 1 the whole of rank s's own data plane, whose collectives are
//     numbered as the sub-group's are, so lossy codecs' seeds agree;
//   - sharded_group(): the simulator's island group, which issues the S shards of each
//     all-reduce itself (a real run's ranks each issue one: src/run/island_ranks.cpp).
//
// Threads: as transport/group.h (a group belongs to one island's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/group.h"

namespace atl::transport {

struct ShardRange {
  int64_t begin = 0, size = 0;
};

// Shards start at multiples of this many elements (64 x 64: a DeMo / SparseLoCo chunk, and a
// whole number of every block codec's blocks), so that block codecs' blocks fall where they
// fall in the unsharded buffer (a selection over the whole buffer, such as top-k, selects
// per shard instead).
constexpr int64_t kShardAlign = 4096;

// The S shards of an n-element buffer: contiguous, in order, each a multiple of kShardAlign
// but the last. Empty when the buffer is too small to give every shard at least one aligned
// block (n < S * kShardAlign): such a buffer is all-reduced whole, as without sharding.
std::vector<ShardRange> shard_ranges(int64_t n, int shards);

// Sub-group key of shard s of S (S < 256; keys of algorithms' own sub-groups stay below
// kShardKeyBase) of the island's group, or (`sub` in 1..kMaxShardedSubgroup) of the
// algorithm's sub-group `sub` (a modular model's modules), and the S a key names (1 for any other key).
constexpr uint32_t kShardKeyBase = 0xA7000000u;
constexpr uint32_t kMaxShardedSubgroup = 255;  // sub-groups of larger keys stay whole (rank 0's)
inline uint32_t shard_key(int s, int shards, uint32_t sub = 0) {
  return kShardKeyBase + (sub << 16) + (static_cast<uint32_t>(shards) << 8) + static_cast<uint32_t>(s);
}
inline int shard_streams(uint32_t key) {
  return (key & 0xFF000000u) == kShardKeyBase ? static_cast<int>((key >> 8) & 0xFFu) : 1;
}
inline bool sharded_subgroup(uint32_t sub) { return sub > 0 && sub <= kMaxShardedSubgroup; }

// The simulator's group of an island of S ranks with a sharded exchange: allreduce_mean of a
// buffer that shard_ranges() cuts runs as S all-reduces of its shards, shard s on
// parent.subgroup(shard_key(s, S), ids) with `ids` every island id that may take part, and
// allgather_parts of S parts as S all-gathers there; everything else goes to `parent`. Its
// sub-group of key k (sharded_subgroup(k)) is sharded alike, shard s on
// parent.subgroup(shard_key(s, S, k), its ids). A result says the first shard's (the shards always end
// with the same contributors here: see agree_shards).
std::unique_ptr<Group> sharded_group(std::unique_ptr<Group> parent, int shards, std::vector<int> ids);

// Agreement after a failure. In a real run the S shards of one all-reduce may end with
// different contributors: a member that died between them is in some and not in the others
// (not in the simulator, whose hub completes every shard of an all-reduce when the last member
// posts them all, in one turn). Every
// island sees the same S results (each shard's contributors agree among its members), so
// each takes the same decision: the contributors every shard must end with are those in all
// of them, and each shard that ended with others runs again from its input, as the next
// collective of its group, over its live members (the dead are left out); until all agree.
struct ShardAgreement {
  Status status;              // not ok: a shard failed outright (not kPeerLost); give up
  std::vector<int> rerun;     // the shards to run again (empty: they agree, or status)
};
ShardAgreement agree_shards(const std::vector<CollectiveResult>& results);
// How many rounds of reruns an all-reduce of `members` members may take before the island
// gives up (each round that does not agree has lost a member).
inline int max_shard_reruns(size_t members) { return static_cast<int>(members) + 1; }

}  // namespace atl::transport
