// The lut2 quantizer: 2-bit codes into a per-frame table of bin means (compression/lut2.h).
#include "compression/lut2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace atl::compression::lut2 {
namespace {

constexpr int kBins = 4;
constexpr double kRangeSigmas = 6.0;
constexpr size_t kHeader = 4 * (1 + kBins);  // shift, table

void put_f32(uint8_t* out, float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(u >> (8 * i));
}

float get_f32(const uint8_t* in) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(in[i]) << (8 * i);
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

void check_count(int64_t m) {
  if (m < 0 || m > (int64_t{1} << 48)) throw std::invalid_argument("lut2: value count " + std::to_string(m));
}

}  // namespace

size_t encoded_size(int64_t m) {
  check_count(m);
  return m == 0 ? 0 : kHeader + static_cast<size_t>((m + 3) / 4);
}

void encode(const float* in, int64_t m, uint8_t* out) {
  check_count(m);
  if (m == 0) return;
  double sum = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < m; ++i) {
    if (std::isfinite(in[i])) {
      sum += in[i];
      ++finite;
    }
  }
  const float shift = finite > 0 ? static_cast<float>(sum / static_cast<double>(finite)) : 0.0f;
  double squares = 0;
  for (int64_t i = 0; i < m; ++i) {
    if (!std::isfinite(in[i])) continue;
    const double c = static_cast<double>(in[i]) - shift;
    squares += c * c;
  }
  const double sigma = finite > 1 ? std::sqrt(squares / static_cast<double>(finite - 1)) : INFINITY;
  double scale = kRangeSigmas * sigma / kBins;
  if (!(scale > 0) || !std::isfinite(scale)) scale = 1.0;

  uint8_t* codes = out + kHeader;
  std::memset(codes, 0, static_cast<size_t>((m + 3) / 4));
  double bin_sum[kBins] = {0, 0, 0, 0};
  int64_t bin_count[kBins] = {0, 0, 0, 0};
  for (int64_t i = 0; i < m; ++i) {
    int bin = kBins / 2;
    if (std::isfinite(in[i])) {
      const double c = static_cast<double>(in[i]) - shift;
      bin = static_cast<int>(std::clamp(std::nearbyint(c / scale + kBins / 2), 0.0, kBins - 1.0));
      bin_sum[bin] += c;
      ++bin_count[bin];
    }
    codes[i / 4] = static_cast<uint8_t>(codes[i / 4] | (bin << (2 * (i % 4))));
  }
  put_f32(out, shift);
  for (int b = 0; b < kBins; ++b) {
    const double mean = bin_count[b] > 0 ? bin_sum[b] / static_cast<double>(bin_count[b]) : 0.0;
    const double limit = std::numeric_limits<float>::max();  // |c| may reach 2x it
    put_f32(out + 4 * (1 + b), static_cast<float>(std::clamp(mean, -limit, limit)));
  }
}

Status decode(const uint8_t* in, size_t size, int64_t m, float* out) {
  if (m < 0 || m > (int64_t{1} << 48)) return corrupt("lut2: value count out of range");
  if (size != encoded_size(m)) return corrupt("lut2: payload has the wrong size for its value count");
  if (m == 0) return Status::ok();
  const float shift = get_f32(in);
  float table[kBins];
  for (int b = 0; b < kBins; ++b) table[b] = get_f32(in + 4 * (1 + b));
  if (!std::isfinite(shift)) return corrupt("lut2: non-finite shift");
  for (float t : table)
    if (!std::isfinite(t)) return corrupt("lut2: non-finite table entry");
  const uint8_t* codes = in + kHeader;
  if (m % 4 != 0 && (codes[m / 4] >> (2 * (m % 4))) != 0) return corrupt("lut2: nonzero padding bits");
  for (int64_t i = 0; i < m; ++i) out[i] = table[(codes[i / 4] >> (2 * (i % 4))) & 3] + shift;
  return Status::ok();
}

namespace {
size_t value_bytes(int64_t m, const StageConfig&) { return encoded_size(m); }
void encode_row(const float* in, int64_t m, const StageConfig&, uint64_t, uint8_t* out) { encode(in, m, out); }
Status decode_row(const uint8_t* in, size_t size, int64_t m, const StageConfig&, float* out) {
  return decode(in, size, m, out);
}
}  // namespace

StageOps stage() {
  StageOps o{StageId::kLut2};
  o.value_bytes = value_bytes;
  o.encode = encode_row;
  o.decode = decode_row;
  return o;
}

}  // namespace atl::compression::lut2
