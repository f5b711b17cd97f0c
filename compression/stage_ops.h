// What each codec stage does in its slot: the behaviour half of the stage registry (the names,
// slots and parameter families are compression/stage.h's kStageInfo). The codec
// (compression/codec.cpp) and the payload bounds (compression/chain.cpp) call stages only
// through these rows, never by id, so a new stage is its own file plus its rows here and in
// kStageInfo.
//
// Only the members of the stage's slot are set:
//   transform  forward / inverse: n values to n values (invertible)
//   sparsify   select: m ascending positions of n; sends_indices: the positions travel (as
//              varints), else the decoder draws them again from the frame seed (calling
//              select with src null: such a stage must depend on (n, m, seed) alone)
//   quantize   value_bytes / encode / decode: m float values to bytes and back
//   lossless   compress / decompress: the serialised output of slots 1-3
// Broken preconditions throw std::invalid_argument; bad input bytes are kCorrupt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compression/stage.h"
#include "src/base/status.h"

namespace atl::compression {

struct StageOps {
  StageId id;
  void (*forward)(const float* x, int64_t n, const StageConfig& st, float* out) = nullptr;
  void (*inverse)(const float* in, int64_t n, const StageConfig& st, float* out) = nullptr;
  void (*select)(const float* src, int64_t n, int64_t m, uint64_t seed, uint32_t* idx) = nullptr;
  bool sends_indices = false;
  size_t (*value_bytes)(int64_t m, const StageConfig& st) = nullptr;
  void (*encode)(const float* in, int64_t m, const StageConfig& st, uint64_t seed, uint8_t* out) = nullptr;
  Status (*decode)(const uint8_t* in, size_t size, int64_t m, const StageConfig& st, float* out) = nullptr;
  void (*compress)(const uint8_t* in, size_t size, const StageConfig& st, std::vector<uint8_t>& out) = nullptr;
  // Into out, at least min_size and at most max_size bytes (kCorrupt otherwise).
  Status (*decompress)(const uint8_t* in, size_t size, size_t min_size, size_t max_size,
                       std::vector<uint8_t>& out) = nullptr;
  // Largest compressed size of `size` input bytes.
  size_t (*compress_bound)(size_t size) = nullptr;
};

// The row of a known id (throws std::invalid_argument for an unknown one).
const StageOps& stage_ops(StageId id);
// Every row, in wire-id order (a test checks it matches kStageInfo row for row).
const std::vector<StageOps>& stage_ops_table();

}  // namespace atl::compression
