// Chunked orthonormal DCT-II (docs/algorithms.md §4.2) over flat fp32 buffers: the "transform"
// slot of a pipeline, and the matrices DeMo's per-tensor chunking uses.
//
//   C_n[f, j] = sqrt(2/n) * c_f * cos(pi * (2j + 1) * f / (2n)),  c_0 = 1/sqrt(2), c_f = 1
//   forward y = C_n x per chunk; inverse x = C_n^T y (C_n is orthonormal: C C^T = I).
//
// Chunking of a flat buffer of n values with chunk length s (the `dct` stage's `chunk`):
// fixed chunks of s values, and a last partial chunk of its own length r = n mod s that uses
// an r-point DCT. §4.2's per-dimension rule sc(d) (largest divisor of d <= s) collapses to
// 1 for a prime-sized buffer and compression would vanish; fixed chunks never do, and both
// rules agree when s divides n. dct_divisor_chunk is §4.2's sc(d), for per-tensor users.
//
// Matrices are computed in double, stored as float, cached per length for the life of the
// process (C and C^T, 8 n^2 bytes per length, n <= kMaxDctChunk); the cache is thread-safe.
// NaN/Inf: a non-finite value in a chunk makes every value of that chunk non-finite after a
// round trip; other chunks are unaffected. Values near FLT_MAX may overflow to Inf.
#pragma once

#include <cstdint>

namespace atl::compression {

// §4.2 sc(d): the largest divisor of d that is <= s (d >= 1, s >= 1); e.g. sc(96, 64) = 48.
int64_t dct_divisor_chunk(int64_t d, int64_t s);

// The n x n matrix C_n, row-major (C[f * n + j]); valid for the life of the process.
const float* dct_matrix(int64_t n);

// y = chunked DCT-II of x[0..n) with chunk length s (1 <= s <= kMaxDctChunk). x and y may be
// the same buffer.
void dct_forward(const float* x, int64_t n, int64_t s, float* y);

// x = inverse of dct_forward (x and y may be the same buffer).
void dct_inverse(const float* y, int64_t n, int64_t s, float* x);

}  // namespace atl::compression
