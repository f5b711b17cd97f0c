// The "sparsify" slot: which k of n positions travel, and how topk's indices are packed.
//
// topk   the k positions of largest |x|, ties broken by lower index; |NaN| ranks above
//        +Inf (magnitudes compare as the bit patterns of |x|), so non-finite values are sent
//        first. Indices travel sorted ascending as LEB128 varints of the gaps
//        g_0 = i_0, g_j = i_j - i_{j-1} - 1 (1..5 bytes each for n <= 2^31).
// randk  k distinct positions drawn from the frame's seed by selection sampling (Knuth's
//        algorithm S) with a splitmix64 stream: the decoder regenerates them, so only the
//        values travel. Every n-choose-k subset is equally likely.
//
// Positions not sent decode to 0. Pure functions; thread-safe. Buffers are caller-owned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"

namespace atl::compression {

// Writes the k largest-|x| positions of x[0..n), ascending, to idx[0..k) (0 <= k <= n <= 2^31).
// Three passes over x (a two-level 16-bit radix select); allocates one 256 KiB histogram.
void topk_indices(const float* x, int64_t n, int64_t k, uint32_t* idx);

// Writes k distinct positions in [0, n), ascending, drawn from `seed`, to idx[0..k).
void randk_indices(uint64_t seed, int64_t n, int64_t k, uint32_t* idx);

// Bytes of the varint gaps of ascending idx[0..k).
size_t varint_index_bytes(const uint32_t* idx, int64_t k);
// Writes them to out (varint_index_bytes(idx, k) bytes); returns bytes written.
size_t encode_varint_indices(const uint32_t* idx, int64_t k, uint8_t* out);
// Reads exactly k gaps from in[0..size) into strictly ascending idx[0..k), each < n, using
// all `size` bytes. kCorrupt for an overlong, unterminated or non-minimal varint, a gap that
// runs past n, or bytes left over.
Status decode_varint_indices(const uint8_t* in, size_t size, int64_t k, int64_t n, uint32_t* idx);

// out[0..n) = 0 except out[idx[i]] = values[i]. `values` may be out[0..k) itself (the scatter
// runs backwards, and idx[i] >= i for ascending distinct indices).
void scatter_values(const float* values, const uint32_t* idx, int64_t k, int64_t n, float* out);

}  // namespace atl::compression
