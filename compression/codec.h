// The frame codec over raw float arrays: runs a chain's stages and writes/reads one frame.
// Pipeline (compression/pipeline.h) wraps it for at::Tensor; this layer has no libtorch, so
// the libFuzzer target (tests/fuzz/frame_fuzz.cpp) drives exactly the decoder production uses.
//
// Payload (docs/wire_format.md): the serialised output of slots 1-3, i.e.
//   [topk index varints] [values: quantizer bytes, or raw little-endian fp32]
// where the values are the n (transformed) values, or the k kept ones; then, when the chain
// ends with zstd, one zstd frame of those bytes instead.
//
// Seeds: randk draws its positions from the frame seed (salted, compression/sparse.h); the
// quantizer's stochastic rounding gets the frame seed itself, keyed by value index.
//
// Pure functions; thread-safe. Broken preconditions (an unvalidated chain, n out of range,
// a null buffer) throw std::invalid_argument; frame problems are returned as kCorrupt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compression/chain.h"
#include "src/base/status.h"

namespace atl::compression {

// Appends one frame encoding x[0..n) (0 <= n <= kMaxElements) through `chain` to `out`.
void encode_frame(const Chain& chain, const float* x, int64_t n, uint64_t seed,
                  std::vector<uint8_t>& out);

// Largest frame encode_frame can write for n elements (header + payload bound).
size_t max_frame_size(const Chain& chain, int64_t n);

// Decodes the frame occupying all of bytes[0..size) into out[0..n). The frame must carry
// exactly `chain` (same stages, same parameters) and exactly n elements; otherwise, or when
// parse_frame or a stage rejects it, kCorrupt. The header, the chain, the sizes and (for
// topk) every index are validated before out is written; a quantizer that rejects its bytes
// may leave out partially written. Allocates at most O(n) bytes (n is the caller's).
Status decode_frame(const Chain& chain, const uint8_t* bytes, size_t size, float* out, int64_t n);

}  // namespace atl::compression
