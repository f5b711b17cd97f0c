// A compression pipeline turns an fp32 buffer into bytes for the wire and back.
//
// This is the seam every transport and algorithm uses. The empty pipeline is the lossless
// reference: the buffer's fp32 values in little-endian byte order. Codec stages (quantizers,
// top-k, DCT, zstd) and the versioned wire frame plug in behind the same two calls.
//
// Pipelines are immutable after construction and thread-safe; encode/decode are pure.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace atl::compression {

class Pipeline {
 public:
  Pipeline() = default;  // lossless fp32

  // Appends the encoded form of `buffer` ([n] float32, contiguous, CPU) to `out`.
  void encode(const at::Tensor& buffer, std::vector<uint8_t>& out) const;

  // Decodes `bytes` into `out` ([n] float32, contiguous, CPU, already sized). Returns a
  // kCorrupt status (and leaves `out` unspecified) when the bytes do not describe exactly
  // out.numel() values. Never reads or writes out of bounds.
  Status decode(const uint8_t* bytes, size_t size, at::Tensor& out) const;

  // Encoded size in bytes of an n-element buffer, when it does not depend on the values.
  size_t encoded_size(int64_t n) const { return static_cast<size_t>(n) * sizeof(float); }

  bool lossless() const { return true; }
  std::string describe() const { return "fp32"; }
};

}  // namespace atl::compression
