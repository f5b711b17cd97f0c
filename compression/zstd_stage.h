// The "lossless" slot: zstd over the serialised bytes of slots 1-3.
//
// Compression keeps one ZSTD_CCtx per thread (and decompression one ZSTD_DCtx), so
// repeated calls do not reallocate zstd's tables. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/base/status.h"

namespace atl::compression {

// Appends one zstd frame (content size recorded in its header) of in[0..size) to `out`.
void zstd_append(const uint8_t* in, size_t size, int level, std::vector<uint8_t>& out);

// Decompresses exactly one zstd frame occupying all of in[0..size) into `out` (resized to
// the content size). The content size the zstd header declares is checked against
// [min_size, max_size] BEFORE anything is allocated or decompressed, and the decompressor
// writes into a buffer of exactly that size. kCorrupt for an unknown content size, more
// than one frame, trailing bytes, a size outside the bounds, or damaged data.
Status zstd_decode_bounded(const uint8_t* in, size_t size, size_t min_size, size_t max_size,
                           std::vector<uint8_t>& out);

}  // namespace atl::compression
