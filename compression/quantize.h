// Value quantizers: the "quantize" slot of a pipeline (compression/stage.h), as plain
// functions over float arrays. Pure and thread-safe.
//
// Formats: fp16, bf16 (casts, round to nearest even); int8, int4 (blockwise absmax scaling);
// fp4 = E3M0 (docs/algorithms.md §2.4, blockwise exponent); fp8 = E4M3 (blockwise scaling).
// Stochastic rounding draws from a counter-based generator keyed by (seed, element index),
// so encoding a buffer in pieces or in parallel gives the same bits as in one piece.
//
// Byte layouts (all multi-byte fields little-endian). n values, split into blocks of `block`
// values (the last block may be shorter); each block is one self-contained record, so the
// encoding of a buffer is the concatenation of its blocks' records:
//
//   fp16   n x uint16  IEEE binary16, round to nearest even (no blocks)
//   bf16   n x uint16  bfloat16 (top half of binary32), round to nearest even (no blocks)
//   int8   per block: fp32 scale s, then len x int8 code c in [-127, 127]      x = c * s
//   int4   per block: fp32 scale s, then ceil(len/2) bytes of 4-bit two's-complement codes
//          c in [-7, 7], element 2i in the low nibble, 2i+1 in the high nibble; an odd
//          block's last high nibble is 0                                       x = c * s
//   fp8    per block: fp32 scale s, then len x E4M3 byte (OCP / float8_e4m3fn: bias 7,
//          subnormals, max 448, no Inf)                                         x = e4m3(c) * s
//   fp4    per block: int8 exponent E in [-128, 127], then ceil(len/2) bytes of 4-bit codes
//          packed as for int4; code = sign bit (bit 3) | exponent field f (bits 0-2);
//          f = 0 -> ±0, f = 1..7 -> ±2^(E - 7 + f), i.e. magnitudes 2^(E-6) .. 2^E
//
// Scaling. int8: s = a / 127, int4: s = a / 7, fp8: s = a / 448, where a = max |x| over the
// block's finite values (fp32 arithmetic); codes round x / s. fp4: E = ceil(log2 a), clamped
// to [-128, 127] (so blocks with a > 2^127 saturate at ±2^127, and values below 2^-135 flush
// to ±0). A block with a = 0 (or whose scale underflows to 0) gets s = 0 / E = -128 and all
// codes 0 (fp4: ±0, keeping each value's sign, like any fp4 value that rounds to zero).
//
// Rounding. kNearest: int8/int4 round half to even; fp8 round to nearest even; fp4 rounds to
// the nearest magnitude in the linear domain (§2.4: between 2^j and 2^(j+1) up iff
// |x| >= 1.5 * 2^j; below 2^(E-6) to 0 iff |x| < 2^(E-7)). kStochastic: unbiased rounding
// to one of the two neighbouring codes (E[decode] = x for values inside the block's range)
// using a uniform draw from hash(seed, global element index). fp16/bf16 ignore `rounding`.
//
// NaN / Inf rule. fp16 and bf16 keep them (NaN -> quiet NaN with the same sign, ±Inf ->
// ±Inf; finite values beyond the format overflow to ±Inf, as IEEE). The blockwise formats
// (int8, int4, fp8, fp4) ignore non-finite inputs when computing a block's scale and encode
// them as code 0, so they decode to 0 (fp4: +0): one bad value never poisons its block.
//
// Error bounds (checked in tests/compression/quantize_test.cpp), per value x of a block with
// absmax a, nearest rounding: int8 |x - x'| <= a/254, int4 <= a/14 (stochastic: a/127, a/7);
// fp8 <= max(2^-4 |x|, 2^-10 * a/448); fp16 / bf16 relative 2^-11 / 2^-8 in the normal
// range; fp4 relative 1/3 for |x| in [2^(E-6), 2^E].
//
// Decoding accepts exactly the byte strings of the right size whose scales are finite and
// >= 0 (sign bit clear) and whose codes are ones the encoder can produce: int8 code -128,
// an int4 nibble 0x8, an fp8 NaN code (0x7F / 0xFF) and a non-zero padding nibble are
// kCorrupt. Every fp4 exponent byte is valid (powers of two below 2^-149 decode to 0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compression/stage.h"
#include "src/base/status.h"

namespace atl::compression::quant {

// Largest n accepted (2^48 values); keeps every size computation far from overflow.
constexpr int64_t kMaxValues = int64_t{1} << 48;

// True for the StageIds this file handles (fp16, bf16, int8, int4, fp4, fp8).
bool is_quantizer(StageId format);

// Exact encoded size in bytes of n values (block = elements per scale block; ignored by
// fp16/bf16). Scales are stored per block, so n need not be a multiple of block.
// Throws std::invalid_argument unless is_quantizer(format), 0 <= n <= kMaxValues and, for the
// blockwise formats, block >= 1.
size_t encoded_size(StageId format, int64_t n, int64_t block);

// Encodes in[0..n) into out[0..encoded_size). `seed` is used by stochastic rounding only.
// Throws on the arguments encoded_size rejects.
void encode(StageId format, const float* in, int64_t n, int64_t block, Rounding rounding,
            uint64_t seed, uint8_t* out);

// Same, for the piece in[0..n) that starts at element `index_offset` of a larger buffer:
// stochastic draws use the global index index_offset + i. Blocks start at in[0], so when
// every piece but the last has a multiple of `block` values, the concatenated pieces'
// bytes equal the encoding of the whole buffer. index_offset >= 0.
void encode(StageId format, const float* in, int64_t n, int64_t block, Rounding rounding,
            uint64_t seed, int64_t index_offset, uint8_t* out);

// Decodes `size` bytes into out[0..n). kCorrupt when size != encoded_size(...) or the bytes
// are impossible (e.g. a non-finite or negative scale). Never reads or writes out of bounds.
// kCorrupt also for an n or block that encoded_size would reject (they may come off the
// wire). On error `out` is left unspecified.
Status decode(StageId format, const uint8_t* in, size_t size, int64_t n, int64_t block,
              float* out);

}  // namespace atl::compression::quant
