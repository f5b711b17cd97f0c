// A compression pipeline turns an fp32 buffer into one self-describing wire frame and back.
//
// This is the seam every transport and algorithm uses. The empty pipeline is the lossless
// reference (raw fp32, little-endian). Stages (compression/stage.h) are validated and
// ordered at construction. encode() writes a frame (compression/frame.h): header with the
// stage chain and parameters, element count, seed, payload length and checksum, then the
// payload. decode() validates the whole frame before touching memory and never allocates
// more than the frame's declared, bounded size.
//
// Pipelines are immutable after construction and thread-safe; encode/decode are pure.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compression/stage.h"
#include "src/base/status.h"

namespace atl::compression {

class Pipeline {
 public:
  Pipeline() = default;  // lossless fp32

  // Validates stage order and parameters; kInvalidArgument names the offending stage.
  static StatusOr<Pipeline> make(std::vector<StageConfig> stages);

  // Appends one frame encoding `buffer` ([n] float32, contiguous, CPU) to `out`. `seed`
  // drives randk and stochastic rounding and travels in the frame.
  void encode(const at::Tensor& buffer, std::vector<uint8_t>& out, uint64_t seed = 0) const;

  // Decodes one frame into `out` ([n] float32, contiguous, CPU, already sized). Returns
  // kCorrupt (leaving `out` unspecified) for a frame that is truncated, oversized, of
  // another version, fails its checksum, is self-inconsistent, or does not hold exactly
  // out.numel() elements. Never reads or writes out of bounds.
  Status decode(const uint8_t* bytes, size_t size, at::Tensor& out) const;

  bool lossless() const;            // true when decode(encode(x)) == x bitwise
  std::string describe() const;     // "int4(block=128)+zstd(3)" or "fp32"
  const std::vector<StageConfig>& stages() const { return stages_; }

 private:
  std::vector<StageConfig> stages_;
};

}  // namespace atl::compression
