// The outer exchange sharded over an island's ranks (islands.shard_exchange; docs/ranks.md
// "The outer exchange, sharded"): an all-reduce of n values is cut into S shards, shard s
// all-reduced on its own, by rank s of every island. Written once for both modes:
//   - shard_ranges(): where the shards of a buffer fall (every island and every rank computes
//     the same from n and S);
//   - shard_key(): the sub-group key that carries shard s >= 1 in the simulator (shard 0 is
//     the island's own group). A real run's rank s carries it on a data plane of its own, whose
//     collectives are numbered as the sub-group's are, so lossy codecs' seeds agree;
//   - ShardedGroup: the simulator's island group, which issues the S shards of each
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
// whole number of every block codec's blocks), so that a shard's encoding is that of the
// same values in the unsharded buffer.
constexpr int64_t kShardAlign = 4096;

// The S shards of an n-element buffer: contiguous, in order, each a multiple of kShardAlign
// but the last. Empty when the buffer is too small to give every shard at least one aligned
// block (n < S * kShardAlign): such a buffer is all-reduced whole, as without sharding.
std::vector<ShardRange> shard_ranges(int64_t n, int shards);

// Sub-group key of shard s >= 1 (keys of algorithms' own sub-groups stay below it).
constexpr uint32_t kShardKeyBase = 0xA7000000u;
inline uint32_t shard_key(int s) { return kShardKeyBase + static_cast<uint32_t>(s); }

// The simulator's group of an island of S ranks with a sharded exchange: allreduce_mean of a
// buffer that shard_ranges() cuts runs as S all-reduces of its shards, shard 0 on `parent`,
// shard s on parent.subgroup(shard_key(s), ids) with `ids` every island id that may take part;
// everything else goes to `parent`. The shards complete with the same contributors (the hub
// sees every member); a result says the first shard's.
std::unique_ptr<Group> sharded_group(std::unique_ptr<Group> parent, int shards, std::vector<int> ids);

// One handle over the S shard handles of one all-reduce: done when all are; the result of
// wait() is shard 0's, or the first that is not ok.
std::unique_ptr<Handle> all_handles(std::vector<std::unique_ptr<Handle>> handles);

}  // namespace atl::transport
