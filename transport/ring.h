// Ring all-reduce schedule shared by every transport that runs one (in-process, ZeroMQ,
// Gloo), so that they add the same numbers in the same order and produce bitwise the same
// result; and the encode seed of the lossy ("direct") scheme, which uses the same chunks.
//
// W members in ring order r = 0..W-1; the buffer is cut into W chunks. Reduce-scatter: at
// step s = 0..W-2, member r sends chunk (r - s) mod W to member r+1, which adds it to its
// own. After it, member r owns the full sum of chunk (r + 1) mod W. All-gather: at step s,
// member r forwards chunk (r + 1 - s) mod W, which the receiver copies.
// Each member sends and receives 2 (W-1)/W of the buffer.
#pragma once

#include <cstdint>
#include <utility>

namespace atl::transport::ring {

// [begin, end) of chunk c when n elements are cut into w chunks (sizes differ by <= 1).
inline std::pair<int64_t, int64_t> chunk_bounds(int64_t n, int w, int c) {
  const int64_t base = n / w, extra = n % w;
  const int64_t begin = c * base + (c < extra ? c : extra);
  return {begin, begin + base + (c < extra ? 1 : 0)};
}

inline int mod(int a, int w) { return ((a % w) + w) % w; }

// Chunk member r sends at reduce-scatter step s.
inline int reduce_scatter_chunk(int r, int s, int w) { return mod(r - s, w); }
// Chunk member r sends at all-gather step s.
inline int all_gather_chunk(int r, int s, int w) { return mod(r + 1 - s, w); }

// Lossy all-reduce (Group::allreduce_mean): the seed with which island `sender_id` encodes
// chunk `chunk` in collective `seq`; phase 0 = its contribution to the chunk's owner, phase 1
// = the owner's mean sent to everyone.
inline uint64_t direct_seed(uint64_t seq, int sender_id, int chunk, int phase) {
  return (seq * 0x9e3779b97f4a7c15ULL) ^ (static_cast<uint64_t>(sender_id) << 32) ^
         (static_cast<uint64_t>(chunk) << 8) ^ static_cast<uint64_t>(phase);
}

}  // namespace atl::transport::ring
