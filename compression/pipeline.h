// A compression pipeline turns an fp32 buffer into one self-describing wire frame and back.
//
// This is the seam every transport and algorithm uses. The empty pipeline is the lossless
// reference (raw fp32, little-endian). Stages (compression/stage.h) are validated and
// ordered at construction. encode() writes a frame (compression/frame.h): header with the
// stage chain and parameters, element count, seed, payload length and checksum, then the
// payload. decode() validates the whole frame before touching memory and never allocates
// more than the frame's declared, bounded size. The work is done by compression/codec.h;
// the byte layout is docs/wire_format.md.
//
// decode() accepts only frames whose stage chain equals this pipeline's (same stages, same
// parameters): peers must agree on the pipeline, and a frame of another pipeline is kCorrupt
// rather than silently decoded with parameters nobody configured.
//
// Pipelines are immutable after construction and thread-safe; encode/decode are pure.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compression/chain.h"
#include "compression/stage.h"
#include "src/base/status.h"

namespace atl::compression {

class Pipeline {
 public:
  Pipeline() = default;  // lossless fp32

  // Validates stage order and parameters; kInvalidArgument names the offending stage
  // ("stage 2 'zstd' must be last"). Fields a stage does not read are reset to defaults.
  static StatusOr<Pipeline> make(std::vector<StageConfig> stages);

  // Appends one frame encoding `buffer` ([n] float32, contiguous, CPU, n <= 2^31) to `out`.
  // `seed` drives randk and stochastic rounding and travels in the frame. Same buffer and
  // seed -> same bytes. Throws (c10::Error) for a buffer of the wrong kind.
  void encode(const at::Tensor& buffer, std::vector<uint8_t>& out, uint64_t seed = 0) const;

  // Decodes one frame into `out` ([n] float32, contiguous, CPU, already sized). Returns
  // kCorrupt (leaving `out` unspecified) for a frame that is truncated, oversized, of
  // another version, fails its checksum, is self-inconsistent, carries another stage chain,
  // or does not hold exactly out.numel() elements. Never reads or writes out of bounds.
  Status decode(const uint8_t* bytes, size_t size, at::Tensor& out) const;

  // Upper bound on the bytes encode() appends for n elements.
  size_t max_encoded_size(int64_t n) const;

  bool lossless() const;            // true when decode(encode(x)) == x bitwise: {} and {zstd}
  std::string describe() const;     // "int4(block=128)+zstd(3)" or "fp32"
  const std::vector<StageConfig>& stages() const { return stages_; }

 private:
  std::vector<StageConfig> stages_;  // canonical
  Chain chain_;                      // the same stages, as the codec takes them
};

}  // namespace atl::compression
