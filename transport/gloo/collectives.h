// The collectives of GlooGroup over a mesh's point-to-point messages (mesh.h). Each one is
// bitwise the in-process reference (transport/inproc/inproc_group.cpp) for the same inputs:
//
//   - HELLO: before any data, the participants exchange what they issued (kind, root, size,
//     weight, codec fingerprint, ring piece length), so that they agree on the weights and
//     the data-phase timeout starts only once everyone has arrived.
//   - ring (lossless codecs): transport/ring.h's reduce-scatter then all-gather, the
//     receiver adding own_chunk.add_(incoming) and the owner dividing by the divisor,
//     pipelined piece by piece as the ZeroMQ ring is (piece k of step t + 1 leaves as soon
//     as piece k of step t has been added or copied), which changes no sum's order. The
//     empty pipeline (raw fp32) sends straight from and into the caller's buffer; other
//     lossless pipelines (zstd) send one frame per piece.
//   - direct (lossy codecs): every member encodes chunk c (ring::chunk_bounds) once with
//     ring::direct_seed(seq, id, c, 0) for its owner parts[c]; the owner sums the decoded
//     contributions in member order with its own exact chunk in place, divides, encodes the
//     mean once (phase 1) and sends it to everyone, keeping decode(encode(mean)).
//   - broadcast: the root's buffer, encoded once with seed 0 (raw fp32 for the empty
//     pipeline), to every other participant.
//   - result hand-over: a finished collective's values (raw fp32) and outcome, from the
//     member that kept them to one that did not finish it (GlooGroup's restarts).
//
// Encoded frames travel as one message each: a u64 length, then the compression frame
// (docs/wire_format.md), whose own checksum is verified on decoding; a frame that does not
// decode throws CorruptMessage. Mesh failures throw MeshBroken (mesh.h).
//
// Thread model: the group's worker thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "compression/pipeline.h"
#include "transport/gloo/mesh.h"
#include "transport/group.h"

namespace atl::transport::gloo_mesh {

// What a member issued as one collective (40 bytes on the wire, little-endian).
struct Hello {
  uint8_t kind = 0;          // 1 all-reduce, 2 broadcast
  int32_t root = -1;         // broadcast root
  uint64_t numel = 0;
  double weight = 1;
  uint64_t codec = 0;        // codec_fingerprint()
  uint64_t piece_elems = 0;  // ring piece length
  bool operator==(const Hello&) const = default;
};

// Peers agree on the pipeline iff they encode an empty buffer to the same bytes (the stage
// ids and parameters are in the frame header), as the ZeroMQ HELLO checks.
uint64_t codec_fingerprint(const compression::Pipeline& codec);

// Sends `mine` to every other participant; returns every participant's, by position in `parts`.
std::vector<Hello> exchange_hello(Wire& wire, const std::vector<int>& parts, const Hello& mine);

struct AllreduceSetup {
  std::vector<int> parts;       // participants, ascending ids (= ring order)
  int pos = 0;                  // this island's index in `parts`
  at::Tensor buffer;            // [n] float32: the (weighted) contribution in, the mean out
  at::Tensor transmitted;       // optional [n]: this member's contribution as others decode it
  const compression::Pipeline* codec = nullptr;
  double divisor = 1;           // W for uniform weights, else the sum of the weights
  int64_t piece_elems = 1;      // ring: elements per message
};

void ring_allreduce(Wire& wire, const AllreduceSetup& s);
void direct_allreduce(Wire& wire, const AllreduceSetup& s);
// Bytes a member expects to receive in an all-reduce (for the data-phase timeout).
double expected_bytes(const AllreduceSetup& s);

void broadcast(Wire& wire, const std::vector<int>& parts, int root, at::Tensor buffer,
               const compression::Pipeline& codec);

// Hand-over: `values` ([n] float32) and the outcome of a finished collective, to `to`.
void send_result(Wire& wire, int to, const CollectiveResult& result, const at::Tensor& values);
// Receives them from `from` into `buffer`; returns the outcome.
CollectiveResult receive_result(Wire& wire, int from, at::Tensor buffer);

}  // namespace atl::transport::gloo_mesh
