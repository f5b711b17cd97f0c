// Quantizer dispatch: argument checks, exact sizes, and the per-format kernels
// (quantize_int.cpp: int8/int4; quantize_float.cpp: fp16/bf16/fp8/fp4). The byte layouts
// and the NaN/Inf rule are documented once, in quantize.h.
#include "compression/quantize.h"

#include <stdexcept>
#include <string>

#include "compression/quantize_internal.h"

namespace atl::compression::quant {

namespace {

// A caller's broken contract: std::invalid_argument "quantize: WHAT" (this file, like the
// whole codec core, needs nothing of libtorch).
void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("quantize: " + what);
}

// Local names, so this file does not depend on the stage registry.
const char* format_name(StageId f) {
  switch (f) {
    case StageId::kFp16: return "fp16";
    case StageId::kBf16: return "bf16";
    case StageId::kInt8: return "int8";
    case StageId::kInt4: return "int4";
    case StageId::kFp8: return "fp8";
    case StageId::kFp4: return "fp4";
    default: return "?";
  }
}

bool is_blockwise(StageId f) {
  return f == StageId::kInt8 || f == StageId::kInt4 || f == StageId::kFp8 ||
         f == StageId::kFp4;
}

// Bytes of one block record of `len` values (len >= 1; see quantize.h).
uint64_t record_bytes(StageId f, uint64_t len) {
  switch (f) {
    case StageId::kInt8:
    case StageId::kFp8: return 4 + len;
    case StageId::kInt4: return 4 + (len + 1) / 2;
    case StageId::kFp4: return 1 + (len + 1) / 2;
    default: return 0;
  }
}

// Empty string when (format, n, block) is acceptable, else why not.
std::string bad_args(StageId format, int64_t n, int64_t block) {
  if (!is_quantizer(format)) {
    return "stage id " + std::to_string(static_cast<int>(format)) + " is not a quantizer";
  }
  if (n < 0 || n > kMaxValues) {
    return "value count " + std::to_string(n) + " outside [0, 2^48]";
  }
  if (is_blockwise(format) && block < 1) {
    return "block size " + std::to_string(block) + " < 1";
  }
  return {};
}

uint64_t size_unchecked(StageId format, int64_t n, int64_t block) {
  if (!is_blockwise(format)) return 2 * static_cast<uint64_t>(n);
  // n <= 2^48 and block >= 1: no product below can overflow 64 bits.
  const uint64_t full = static_cast<uint64_t>(n / block);
  const uint64_t tail = static_cast<uint64_t>(n % block);
  uint64_t size = full ? full * record_bytes(format, static_cast<uint64_t>(block)) : 0;
  if (tail) size += record_bytes(format, tail);
  return size;
}

}  // namespace

bool is_quantizer(StageId format) {
  return format == StageId::kFp16 || format == StageId::kBf16 || is_blockwise(format);
}

size_t encoded_size(StageId format, int64_t n, int64_t block) {
  const std::string bad = bad_args(format, n, block);
  require(bad.empty(), bad);
  return static_cast<size_t>(size_unchecked(format, n, block));
}

void encode(StageId format, const float* in, int64_t n, int64_t block, Rounding rounding,
            uint64_t seed, uint8_t* out) {
  encode(format, in, n, block, rounding, seed, /*index_offset=*/0, out);
}

void encode(StageId format, const float* in, int64_t n, int64_t block, Rounding rounding,
            uint64_t seed, int64_t index_offset, uint8_t* out) {
  const std::string bad = bad_args(format, n, block);
  require(bad.empty(), bad);
  require(index_offset >= 0, "negative index_offset " + std::to_string(index_offset));
  require(rounding == Rounding::kNearest || rounding == Rounding::kStochastic,
          "unknown rounding mode " + std::to_string(static_cast<int>(rounding)));
  if (n == 0) return;
  const detail::Noise noise(seed, static_cast<uint64_t>(index_offset));
  const detail::Noise* np = rounding == Rounding::kStochastic ? &noise : nullptr;
  switch (format) {
    case StageId::kFp16: return detail::encode_fp16(in, n, out);
    case StageId::kBf16: return detail::encode_bf16(in, n, out);
    case StageId::kInt8: return detail::encode_int(8, in, n, block, np, out);
    case StageId::kInt4: return detail::encode_int(4, in, n, block, np, out);
    case StageId::kFp8: return detail::encode_fp8(in, n, block, np, out);
    case StageId::kFp4: return detail::encode_fp4(in, n, block, np, out);
    default: break;
  }
  require(false, "unreachable format");
}

Status decode(StageId format, const uint8_t* in, size_t size, int64_t n, int64_t block,
              float* out) {
  const std::string bad = bad_args(format, n, block);
  if (!bad.empty()) return corrupt("quantize: " + bad);
  const uint64_t want = size_unchecked(format, n, block);
  if (static_cast<uint64_t>(size) != want) {
    return corrupt(std::string("quantize: ") + format_name(format) + " payload of " +
                   std::to_string(n) + " values has " + std::to_string(size) +
                   " bytes, expected " + std::to_string(want));
  }
  if (n == 0) return Status::ok();
  switch (format) {
    case StageId::kFp16: detail::decode_fp16(in, n, out); return Status::ok();
    case StageId::kBf16: detail::decode_bf16(in, n, out); return Status::ok();
    case StageId::kInt8: return detail::decode_int(8, in, n, block, out);
    case StageId::kInt4: return detail::decode_int(4, in, n, block, out);
    case StageId::kFp8: return detail::decode_fp8(in, n, block, out);
    case StageId::kFp4: return detail::decode_fp4(in, n, block, out);
    default: break;
  }
  return corrupt("quantize: unreachable format");
}

}  // namespace atl::compression::quant
