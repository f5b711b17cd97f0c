// The "lut2" quantizer (quantize slot): 2-bit codes into a table of the four bin means, one
// table per frame. It is SparseLoCo's value format (Templar's TopKCompressor, arXiv
// 2508.15706; docs/algorithms.md §13) and usable by any exchange: {quantize: lut2}.
//
// Encoding of m finite values x (in double; shift and the table stored as float32, the table
// clamped to the float range):
//   shift = mean(x)                          c_i = x_i - shift
//   sigma = sqrt(sum c_i^2 / (m - 1))        (unbiased; m = 1 gives +inf)
//   scale = 6 * sigma / 4                    (±6 sigma over 4 bins); 1 when 0, NaN or inf
//   bin_i = clamp(round_half_even(c_i / scale + 2), 0, 3)
//   table[b] = mean of the c_i in bin b (0 for an empty bin)
//   decode: x'_i = table[bin_i] + shift
// A non-finite value is left out of shift, sigma and the table and gets bin 2 (the bin of the
// mean): it decodes to a finite value, never to NaN (as the blockwise formats, it cannot
// poison its frame). The bins are Templar's: centres at -2, -1, 0, +1 scales, the outer two
// clamped, and each decodes to the mean of what fell into it, so the error of a value is at
// most the spread of its bin (tests/compression/lut2_test.cpp checks the formula against a
// float64 recomputation).
//
// Bytes (little-endian): m = 0: nothing. Otherwise f32 shift, f32 table[4], then ceil(m/4)
// bytes of codes, value 4j + r in bits 2r..2r+1 of byte j; unused high bits of the last byte
// are 0. Decoding accepts exactly the strings of that size whose shift and table are finite
// and whose padding is 0 (kCorrupt otherwise). Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compression/stage_ops.h"
#include "src/base/status.h"

namespace atl::compression::lut2 {

size_t encoded_size(int64_t m);
void encode(const float* in, int64_t m, uint8_t* out);
Status decode(const uint8_t* in, size_t size, int64_t m, float* out);

// Its row of the stage registry (compression/stage_ops.cpp).
StageOps stage();

}  // namespace atl::compression::lut2
