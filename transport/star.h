// The star all-reduce (`transport.collective: star`): every member sends its encoded buffer
// to the server endpoint (the coordinator in real runs, transport::kServer on the simulator's
// network), which decodes the contributions, reduces them in ascending member-id order in
// fp32 and sends the mean back, encoded once, so that every member decodes the same bytes.
// What both implementations share, so that they agree bitwise:
//   - the encode seeds (contribution_seed, mean_seed);
//   - the reduction (mean), with allreduce_mean's weights: uniform weights divide the sum by
//     the member count, others multiply each decoded contribution by its weight and divide
//     the sum by the sum of the weights;
//   - the tag namespace of the coordinator's push/pull that carries it in real runs.
// One member alone keeps its own buffer (the mean of one buffer is that buffer, bitwise).
//
// Implementations: InprocHub::set_star (simulation) and, over ZeroMQ, the island's
// StarClient (transport/zmq/star_client.h) with the coordinator's StarReducer
// (transport/zmq/star_reducer.h). Pure functions; thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "transport/ring.h"

namespace atl::transport::star {

// Seed with which member `id` encodes its contribution to collective `seq`.
inline uint64_t contribution_seed(uint64_t seq, int id) { return ring::direct_seed(seq, id, 0, 2); }
// Seed with which the server encodes the mean of collective `seq`.
inline uint64_t mean_seed(uint64_t seq) { return ring::direct_seed(seq, 0, 0, 3); }

// The mean of `values` ([n] float32 each, ascending member id) with `weights` (same order,
// finite and > 0), summed in that order in fp32 into a new tensor. With non-uniform weights
// `values` are multiplied by their weights in place.
at::Tensor mean(std::vector<at::Tensor>& values, const std::vector<double>& weights);

// Control-plane tags (ControlPlane::push/pull) with the top bit set belong to the star
// all-reduce; the server role's tags (OuterServer) must leave it clear. The next two bits
// say what a tag carries; the low 61 bits are a collective's sequence number.
constexpr uint64_t kTagBit = uint64_t{1} << 63;
enum class TagKind : uint8_t {
  kData = 0,        // push: a contribution; pull: the result (RESULT_INFO body + mean frame)
  kInfo = 1,        // pull: waits for completion, answered with the RESULT_INFO body only
  kFirstSeq = 2,    // push (empty frame): the sender takes part from this seq on (a joiner)
};
constexpr uint64_t kSeqMask = (uint64_t{1} << 61) - 1;

inline bool is_star_tag(uint64_t tag) { return (tag & kTagBit) != 0; }
inline uint64_t tag(uint64_t seq, TagKind kind) {
  return kTagBit | (static_cast<uint64_t>(kind) << 61) | (seq & kSeqMask);
}
inline TagKind tag_kind(uint64_t tag) { return static_cast<TagKind>((tag >> 61) & 3); }
inline uint64_t tag_seq(uint64_t tag) { return tag & kSeqMask; }

}  // namespace atl::transport::star
