// Value quantizers: the "quantize" slot of a pipeline (compression/stage.h), as plain
// functions over float arrays. Pure and thread-safe.
//
// Formats: fp16, bf16 (casts, round to nearest even); int8, int4 (blockwise absmax scaling);
// fp4 = E3M0 (ALGORITHMS.md §2.4, blockwise exponent); fp8 = E4M3 (blockwise scaling).
// Stochastic rounding draws from a counter-based generator keyed by (seed, element index),
// so encoding a buffer in pieces or in parallel gives the same bits as in one piece.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compression/stage.h"
#include "src/base/status.h"

namespace atl::compression::quant {

// True for the StageIds this file handles (fp16, bf16, int8, int4, fp4, fp8).
bool is_quantizer(StageId format);

// Exact encoded size in bytes of n values (block = elements per scale block; ignored by
// fp16/bf16). Scales are stored per block, so n need not be a multiple of block.
size_t encoded_size(StageId format, int64_t n, int64_t block);

// Encodes in[0..n) into out[0..encoded_size). `seed` is used by stochastic rounding only.
void encode(StageId format, const float* in, int64_t n, int64_t block, Rounding rounding,
            uint64_t seed, uint8_t* out);

// Decodes `size` bytes into out[0..n). kCorrupt when size != encoded_size(...) or the bytes
// are impossible (e.g. a non-finite or negative scale). Never reads or writes out of bounds.
Status decode(StageId format, const uint8_t* in, size_t size, int64_t n, int64_t block,
              float* out);

}  // namespace atl::compression::quant
