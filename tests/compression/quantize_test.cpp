// Value quantizers (compression/quantize.h): golden byte layouts, independent reference
// conversions for fp16 / bf16 / fp8, documented error bounds over many inputs and shapes,
// docs/algorithms.md §9 oracle 12 for fp4 (E3M0), the NaN/Inf rule, stochastic rounding
// (unbiased, deterministic, piecewise), and hostile bytes on decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compression/quantize.h"

namespace atl::compression::quant {
namespace {

using Bytes = std::vector<uint8_t>;
using F = StageId;

constexpr StageId kAll[] = {F::kFp16, F::kBf16, F::kInt8, F::kInt4, F::kFp8, F::kFp4};
constexpr StageId kBlockwise[] = {F::kInt8, F::kInt4, F::kFp8, F::kFp4};
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string name(StageId f) {
  switch (f) {
    case F::kFp16: return "fp16";
    case F::kBf16: return "bf16";
    case F::kInt8: return "int8";
    case F::kInt4: return "int4";
    case F::kFp8: return "fp8";
    case F::kFp4: return "fp4";
    default: return "?";
  }
}

Bytes enc(StageId f, const float* x, int64_t n, int64_t block,
          Rounding r = Rounding::kNearest, uint64_t seed = 0, int64_t offset = 0) {
  Bytes out(encoded_size(f, n, block));
  encode(f, x, n, block, r, seed, offset, out.data());
  return out;
}
Bytes enc(StageId f, const std::vector<float>& x, int64_t block,
          Rounding r = Rounding::kNearest, uint64_t seed = 0) {
  return enc(f, x.data(), static_cast<int64_t>(x.size()), block, r, seed);
}

std::vector<float> dec(StageId f, const Bytes& b, int64_t n, int64_t block) {
  std::vector<float> y(static_cast<size_t>(n), -12345.0f);
  const Status st = decode(f, b.data(), b.size(), n, block, y.data());
  EXPECT_TRUE(st.is_ok()) << name(f) << ": " << st.to_string();
  return y;
}

Bytes le32(float f) {
  Bytes b(4);
  std::memcpy(b.data(), &f, 4);
  return b;
}
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<float> gaussian(int64_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

double finite_absmax(const float* x, int64_t len) {
  double a = 0;
  for (int64_t j = 0; j < len; ++j) {
    if (std::isfinite(x[j])) a = std::max(a, std::fabs(static_cast<double>(x[j])));
  }
  return a;
}

double rel_l2(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

// Block exponents E of an fp4 encoding (the first byte of each block record).
std::vector<int> fp4_exponents(const Bytes& b, int64_t n, int64_t block) {
  std::vector<int> e;
  size_t at = 0;
  for (int64_t s = 0; s < n; s += block) {
    const int64_t len = std::min(block, n - s);
    e.push_back(static_cast<int8_t>(b.at(at)));
    at += 1 + static_cast<size_t>((len + 1) / 2);
  }
  return e;
}

// ---- independent references ---------------------------------------------------------------

// Every finite non-negative value of a format, ascending with its code.
struct Grid {
  std::vector<double> value;
  std::vector<uint32_t> code;
  double overflow = 0;  // |x| >= overflow rounds to Inf
  // Nearest value to |x| (ties to the even code); -1 for Inf.
  int nearest(double ax) const {
    if (ax >= overflow) return -1;
    auto it = std::lower_bound(value.begin(), value.end(), ax);
    if (it == value.end()) return static_cast<int>(value.size()) - 1;
    size_t hi = static_cast<size_t>(it - value.begin());
    if (hi == 0) return 0;
    const double dlo = ax - value[hi - 1], dhi = value[hi] - ax;
    if (dlo < dhi) return static_cast<int>(hi - 1);
    if (dhi < dlo) return static_cast<int>(hi);
    return static_cast<int>((code[hi] & 1) ? hi - 1 : hi);
  }
};

Grid half_grid() {  // IEEE binary16, from the definition
  Grid g;
  for (uint32_t c = 0; c < 0x7c00; ++c) {
    const int e = static_cast<int>(c >> 10), m = static_cast<int>(c & 0x3ff);
    g.value.push_back(e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
    g.code.push_back(c);
  }
  g.overflow = 65520;  // the midpoint between 65504 and 2^16 ties to the even code, Inf
  return g;
}

Grid e4m3_grid() {  // OCP E4M3 (float8_e4m3fn): bias 7, S.1111.111 = NaN, no Inf
  Grid g;
  for (uint32_t c = 0; c < 0x7f; ++c) {
    const int e = static_cast<int>(c >> 3), m = static_cast<int>(c & 7);
    g.value.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
    g.code.push_back(c);
  }
  g.overflow = 464;  // never reached: blocks are scaled into [-448, 448]
  return g;
}

uint16_t ref_bf16(float x) {  // nearest of the two bf16 neighbours, computed in double
  const uint32_t w = std::bit_cast<uint32_t>(x);
  const uint32_t lo = w & 0xffff0000u, hi = lo + 0x10000u;
  const double d = std::fabs(static_cast<double>(x));
  const double vlo = std::fabs(static_cast<double>(std::bit_cast<float>(lo)));
  const double vhi = (hi & 0x7fffffffu) == 0x7f800000u
                         ? std::ldexp(1.0, 128)  // Inf: rounding past the max goes here
                         : std::fabs(static_cast<double>(std::bit_cast<float>(hi)));
  if (d - vlo < vhi - d) return static_cast<uint16_t>(lo >> 16);
  if (vhi - d < d - vlo) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

// ---- sizes and argument checks ------------------------------------------------------------

TEST(Quantize, EncodedSizes) {
  EXPECT_EQ(encoded_size(F::kFp16, 7, 0), 14u);
  EXPECT_EQ(encoded_size(F::kBf16, 0, 1), 0u);
  EXPECT_EQ(encoded_size(F::kInt8, 300, 128), 2 * (4 + 128) + (4 + 44u));
  EXPECT_EQ(encoded_size(F::kInt4, 5, 2), 3 * (4 + 1u));
  EXPECT_EQ(encoded_size(F::kInt4, 256, 128), 2 * (4 + 64u));
  EXPECT_EQ(encoded_size(F::kFp8, 129, 128), (4 + 128) + (4 + 1u));
  EXPECT_EQ(encoded_size(F::kFp4, 129, 128), (1 + 64) + (1 + 1u));
  EXPECT_EQ(encoded_size(F::kFp4, 7, 3), 2 * (1 + 2) + (1 + 1u));
  EXPECT_EQ(encoded_size(F::kInt8, 5, int64_t{1} << 62), 9u);  // one short block
  EXPECT_EQ(encoded_size(F::kInt4, kMaxValues, 1), 5 * static_cast<size_t>(kMaxValues));
  for (StageId f : kBlockwise) EXPECT_EQ(encoded_size(f, 0, 128), 0u);
}

TEST(Quantize, RejectsBadArguments) {
  EXPECT_TRUE(is_quantizer(F::kFp4));
  EXPECT_FALSE(is_quantizer(F::kZstd));
  EXPECT_FALSE(is_quantizer(F::kTopK));
  EXPECT_ANY_THROW(encoded_size(F::kZstd, 10, 1));
  EXPECT_ANY_THROW(encoded_size(F::kInt8, -1, 128));
  EXPECT_ANY_THROW(encoded_size(F::kInt8, kMaxValues + 1, 128));
  EXPECT_ANY_THROW(encoded_size(F::kInt4, 10, 0));
  EXPECT_NO_THROW(encoded_size(F::kFp16, 10, 0));  // casts ignore block
  float x[4] = {1, 2, 3, 4};
  uint8_t out[64];
  EXPECT_ANY_THROW(encode(F::kInt8, x, 4, 0, Rounding::kNearest, 0, out));
  EXPECT_ANY_THROW(encode(F::kInt8, x, 4, 2, Rounding::kNearest, 0, -1, out));
  EXPECT_ANY_THROW(encode(F::kDct, x, 4, 2, Rounding::kNearest, 0, out));
  EXPECT_ANY_THROW(encode(F::kInt8, x, 4, 2, static_cast<Rounding>(7), 0, out));
  float y[4];
  EXPECT_EQ(decode(F::kZstd, out, 0, 0, 1, y).code(), StatusCode::kCorrupt);
  EXPECT_EQ(decode(F::kInt8, out, 0, -1, 1, y).code(), StatusCode::kCorrupt);
  EXPECT_EQ(decode(F::kInt8, out, 0, kMaxValues + 1, 1, y).code(), StatusCode::kCorrupt);
  EXPECT_EQ(decode(F::kFp4, out, 0, 4, 0, y).code(), StatusCode::kCorrupt);
  EXPECT_TRUE(decode(F::kFp4, out, 0, 0, 5, y).is_ok());
}

// ---- golden layouts -----------------------------------------------------------------------

TEST(Quantize, GoldenInt8) {
  const std::vector<float> x = {127, -63.5f, 0, 1, -2};  // blocks {127,-63.5,0,1}, {-2}
  EXPECT_EQ(enc(F::kInt8, x, 4),
            cat({le32(1.0f), {0x7f, 0xc0, 0x00, 0x01}, le32(2.0f / 127), {0x81}}));
  EXPECT_EQ(dec(F::kInt8, enc(F::kInt8, x, 4), 5, 4),
            (std::vector<float>{127, -64, 0, 1, -127 * (2.0f / 127)}));
}

TEST(Quantize, GoldenInt4) {
  // Block 1: s = 1, codes 7 -7 4 (3.5 ties to even) -> 0x97, 0x04 (zero pad nibble).
  // Block 2: s = 2/7, codes 7 0 -4 -> 0x07, 0x0c.
  const std::vector<float> x = {7, -7, 3.5f, 2, 0, -1.25f};
  EXPECT_EQ(enc(F::kInt4, x, 3),
            cat({le32(1.0f), {0x97, 0x04}, le32(2.0f / 7), {0x07, 0x0c}}));
  const std::vector<float> y = dec(F::kInt4, enc(F::kInt4, x, 3), 6, 3);
  EXPECT_EQ(y[0], 7);
  EXPECT_EQ(y[1], -7);
  EXPECT_EQ(y[2], 4);
  EXPECT_EQ(y[5], -4 * (2.0f / 7));
}

TEST(Quantize, GoldenFp4) {
  // a = 1 -> E = 0; 1 -> 2^0 (f 7); -0.75 = -1.5*2^-1 rounds up to -2^0; 0.3 -> 2^-2 (f 5).
  const std::vector<float> x = {1.0f, -0.75f, 0.3f, 0.0f, 0.01f};
  EXPECT_EQ(enc(F::kFp4, x, 5), (Bytes{0x00, 0xf7, 0x05, 0x01}));
  // 0.01 is in [2^-7, 2^-6), below the grid's 2^(E-6), so it rounds up to 2^-6 (f 1). In a
  // block of its own a = 0.01 -> E = -6 (0xfa) and it rounds to 2^-7 (f 6).
  EXPECT_EQ(dec(F::kFp4, enc(F::kFp4, x, 5), 5, 5),
            (std::vector<float>{1.0f, -1.0f, 0.25f, 0.0f, 0.015625f}));
  EXPECT_EQ(enc(F::kFp4, std::vector<float>{0.01f}, 1), (Bytes{0xfa, 0x06}));
}

TEST(Quantize, GoldenFp8) {
  const std::vector<float> x = {448, -1, 0, 0.01f, 3.2f};  // scale 1
  // 448 = 0x7e; -1 = 0xb8; 0.01 = 5.12 * 2^-9 -> subnormal 5; 3.2 -> 3.25 = 0x45.
  EXPECT_EQ(enc(F::kFp8, x, 8), cat({le32(1.0f), {0x7e, 0xb8, 0x00, 0x05, 0x45}}));
}

TEST(Quantize, GoldenFp16Bf16) {
  const std::vector<float> x = {1.0f, -2.0f, 65504.0f, 1e-8f, 6e-8f};
  EXPECT_EQ(enc(F::kFp16, x, 1), (Bytes{0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0, 0, 1, 0}));
  // 1 + 2^-8 ties to even (1.0); 1 + 3*2^-8 ties to even (1 + 2^-6).
  const std::vector<float> b = {1.0f, 1.00390625f, 1.01171875f, -3.0f};
  EXPECT_EQ(enc(F::kBf16, b, 1), (Bytes{0x80, 0x3f, 0x80, 0x3f, 0x82, 0x3f, 0x40, 0xc0}));
}

// ---- cast conformance against the references ----------------------------------------------

TEST(Quantize, Fp16MatchesIeeeReference) {
  const Grid g = half_grid();
  // Decode: every one of the 65536 codes.
  Bytes all(2 * 65536);
  for (uint32_t c = 0; c < 65536; ++c) {
    all[2 * c] = static_cast<uint8_t>(c);
    all[2 * c + 1] = static_cast<uint8_t>(c >> 8);
  }
  const std::vector<float> d = dec(F::kFp16, all, 65536, 1);
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint32_t mag = c & 0x7fff;
    const double sign = (c & 0x8000) ? -1 : 1;
    if (mag > 0x7c00) {
      ASSERT_TRUE(std::isnan(d[c])) << c;
    } else if (mag == 0x7c00) {
      ASSERT_EQ(d[c], sign * kInf) << c;
    } else {
      ASSERT_EQ(static_cast<double>(d[c]), sign * g.value[mag]) << c;
      ASSERT_EQ(std::signbit(d[c]), (c & 0x8000) != 0) << c;
    }
  }
  // Encode: a spread of bit patterns plus every half midpoint and its neighbours.
  std::vector<float> x;
  for (uint64_t w = 0; w < (uint64_t{1} << 32); w += 4099) {
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(w)));
  }
  for (size_t i = 0; i + 1 < g.value.size(); ++i) {
    const float mid = static_cast<float>((g.value[i] + g.value[i + 1]) / 2);  // exact
    x.insert(x.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf), -mid});
  }
  x.insert(x.end(), {65519.996f, 65520.0f, 1e30f, -kInf, kInf, kNaN, -kNaN, 0.0f, -0.0f});
  const Bytes e = enc(F::kFp16, x, 1);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t h = static_cast<uint16_t>(e[2 * i] | (e[2 * i + 1] << 8));
    const uint16_t sign = std::signbit(x[i]) ? 0x8000 : 0;
    if (std::isnan(x[i])) {
      ASSERT_TRUE((h & 0x7fff) > 0x7c00) << i;
      continue;
    }
    const int k = g.nearest(std::fabs(static_cast<double>(x[i])));
    const uint16_t want = static_cast<uint16_t>(sign | (k < 0 ? 0x7c00 : g.code[k]));
    ASSERT_EQ(h, want) << "x = " << x[i];
  }
}

TEST(Quantize, Bf16MatchesReference) {
  std::vector<float> x;
  for (uint64_t w = 0; w < (uint64_t{1} << 32); w += 2053) {
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(w)));
  }
  for (uint32_t hi = 0; hi < 0x7f80; hi += 7) {  // exact midpoints, both parities
    const uint32_t mid = (hi << 16) | 0x8000u;
    x.insert(x.end(), {std::bit_cast<float>(mid), std::bit_cast<float>(mid + 1),
                       std::bit_cast<float>(mid - 1)});
  }
  x.insert(x.end(), {FLT_MAX, -FLT_MAX, kInf, -kInf, kNaN, -kNaN, FLT_TRUE_MIN});
  const Bytes e = enc(F::kBf16, x, 1);
  const std::vector<float> y = dec(F::kBf16, e, static_cast<int64_t>(x.size()), 1);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t h = static_cast<uint16_t>(e[2 * i] | (e[2 * i + 1] << 8));
    if (std::isnan(x[i])) {
      ASSERT_TRUE(std::isnan(y[i])) << i;
      ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i]));
      continue;
    }
    ASSERT_EQ(h, ref_bf16(x[i])) << "x = " << x[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), static_cast<uint32_t>(h) << 16);
  }
  EXPECT_EQ(y[y.size() - 7], kInf);  // FLT_MAX rounds past the bf16 max: overflow to Inf
}

TEST(Quantize, Fp8MatchesE4m3Reference) {
  const Grid g = e4m3_grid();
  ASSERT_EQ(g.value.back(), 448.0);
  // Put 448 first in every block so the scale is exactly 1 and codes are plain E4M3.
  std::vector<float> x;
  std::vector<float> probes;
  for (size_t i = 0; i + 1 < g.value.size(); ++i) {
    const float lo = static_cast<float>(g.value[i]), hi = static_cast<float>(g.value[i + 1]);
    const float mid = (lo + hi) / 2;
    probes.insert(probes.end(), {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf),
                                 -mid, lo + (hi - lo) * 0.3f});
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-448, 448);
  for (int i = 0; i < 20000; ++i) probes.push_back(u(rng));
  const int64_t block = 64;
  for (size_t i = 0; i < probes.size(); i += block - 1) {
    x.push_back(448.0f);
    for (size_t j = i; j < std::min(probes.size(), i + block - 1); ++j) x.push_back(probes[j]);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  const Bytes e = enc(F::kFp8, x, block);
  const std::vector<float> y = dec(F::kFp8, e, n, block);
  for (int64_t i = 0; i < n; ++i) {
    const size_t b = static_cast<size_t>(i / block);
    ASSERT_EQ(std::memcmp(&e[b * (4 + block)], le32(1.0f).data(), 4), 0);
    const uint8_t code = e[b * (4 + block) + 4 + static_cast<size_t>(i % block)];
    const int k = g.nearest(std::fabs(static_cast<double>(x[i])));
    ASSERT_GE(k, 0);
    ASSERT_EQ(code & 0x7f, g.code[k]) << "x = " << x[i];
    ASSERT_EQ(code >> 7, std::signbit(x[i]) ? 1 : 0) << "x = " << x[i];
    ASSERT_EQ(std::fabs(static_cast<double>(y[i])), g.value[k]);
  }
}

// ---- error bounds over many inputs and shapes ---------------------------------------------

// Checks every documented bound of quantize.h for one (format, rounding, x, block).
void check_round_trip(StageId f, Rounding r, const std::vector<float>& x, int64_t block,
                      const std::string& what) {
  SCOPED_TRACE(name(f) + (r == Rounding::kStochastic ? " stochastic " : " nearest ") + what +
               " n=" + std::to_string(x.size()) + " block=" + std::to_string(block));
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t size = encoded_size(f, n, block);
  // The encoder writes every byte of its output and nothing past it.
  Bytes a(size + 16, 0xab), b(size + 16, 0x00);
  encode(f, x.data(), n, block, r, 42, a.data());
  encode(f, x.data(), n, block, r, 42, b.data());
  for (size_t i = size; i < size + 16; ++i) ASSERT_EQ(a[i], 0xab);
  a.resize(size);
  b.resize(size);
  ASSERT_EQ(a, b);
  const std::vector<float> y = dec(f, a, n, block);
  const bool sr = r == Rounding::kStochastic;
  const double slack = std::ldexp(1.0, -138);  // subnormal scales round in absolute terms

  if (f == F::kFp16 || f == F::kBf16) {
    const double max = f == F::kFp16 ? 65504.0 : 3.3895313892515355e38;
    const double min_normal = f == F::kFp16 ? std::ldexp(1.0, -14) : FLT_MIN;
    const double rel = f == F::kFp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double abs = f == F::kFp16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -134);
    for (int64_t i = 0; i < n; ++i) {
      const double xi = x[i], yi = y[i];
      if (std::isnan(x[i])) { ASSERT_TRUE(std::isnan(y[i])); continue; }
      if (std::isinf(x[i])) { ASSERT_EQ(y[i], x[i]); continue; }
      if (std::fabs(xi) > max) { ASSERT_TRUE(std::fabs(yi) >= max) << i; continue; }
      const double bound = std::fabs(xi) >= min_normal ? rel * std::fabs(xi) : abs;
      ASSERT_LE(std::fabs(xi - yi), bound) << "i=" << i << " x=" << xi << " y=" << yi;
      if (yi != 0) { ASSERT_EQ(std::signbit(x[i]), std::signbit(y[i])); }
    }
    return;
  }

  const std::vector<int> exps = f == F::kFp4 ? fp4_exponents(a, n, block) : std::vector<int>{};
  for (int64_t s = 0, bi = 0; s < n; s += block, ++bi) {
    const int64_t len = std::min(block, n - s);
    const double am = finite_absmax(x.data() + s, len);
    for (int64_t j = s; j < s + len; ++j) {
      const double xi = x[j], yi = y[j];
      ASSERT_TRUE(std::isfinite(y[j])) << j;
      if (!std::isfinite(x[j])) {  // the NaN/Inf rule: encoded as 0
        ASSERT_EQ(std::bit_cast<uint32_t>(y[j]), 0u) << j;
        continue;
      }
      const double err = std::fabs(xi - yi);
      if (yi != 0) { ASSERT_EQ(std::signbit(x[j]), std::signbit(y[j])) << j; }
      if (f == F::kInt8 || f == F::kInt4) {
        const double q = f == F::kInt8 ? 127 : 7;
        const double bound = (sr ? am / q : am / (2 * q)) * (1 + 1e-4) + slack;
        ASSERT_LE(err, bound) << "j=" << j << " x=" << xi << " y=" << yi << " a=" << am;
      } else if (f == F::kFp8) {
        const double s8 = am / 448;
        const double bound = (sr ? std::max(std::ldexp(std::fabs(xi), -3), std::ldexp(s8, -9))
                                 : std::max(std::ldexp(std::fabs(xi), -4), std::ldexp(s8, -10))) *
                                 (1 + 1e-4) + slack;
        ASSERT_LE(err, bound) << "j=" << j << " x=" << xi << " y=" << yi << " a=" << am;
      } else {  // fp4: docs/algorithms.md §9 oracle 12
        const int e = exps[static_cast<size_t>(bi)];
        if (am >= std::ldexp(1.0, -128) && am <= std::ldexp(1.0, 127)) {
          ASSERT_EQ(e, static_cast<int>(std::ceil(std::log2(am)))) << "a=" << am;
        }
        if (yi != 0) {  // a power of two in [2^(E-6), 2^E]
          int k;
          ASSERT_EQ(std::frexp(std::fabs(yi), &k), 0.5) << yi;
          ASSERT_GE(k - 1, e - 6);
          ASSERT_LE(k - 1, e);
        }
        if (xi == 0) { ASSERT_EQ(yi, 0.0); }
        const double ax = std::fabs(xi), lo = std::ldexp(1.0, e - 6), hi = std::ldexp(1.0, e);
        if (ax >= lo && ax <= hi) {
          ASSERT_LE(err, sr ? ax : ax / 3) << "x=" << xi << " y=" << yi << " E=" << e;
          ASSERT_NE(yi, 0.0);
        } else if (ax < lo) {
          ASSERT_TRUE(std::fabs(yi) == 0 || std::fabs(yi) == lo) << "x=" << xi << " y=" << yi;
          if (!sr) { ASSERT_EQ(std::fabs(yi), ax >= lo / 2 ? lo : 0.0) << "x=" << xi; }
        }
      }
    }
  }
}

TEST(Quantize, RoundTripBoundsOverInputsAndShapes) {
  struct Input {
    std::string what;
    std::vector<float> (*make)(int64_t n);
  };
  const std::vector<Input> inputs = {
      {"gaussian", [](int64_t n) { return gaussian(n, 1); }},
      {"zeros", [](int64_t n) { return std::vector<float>(size_t(n), 0.0f); }},
      {"negzeros", [](int64_t n) { return std::vector<float>(size_t(n), -0.0f); }},
      {"constant", [](int64_t n) { return std::vector<float>(size_t(n), -3.25f); }},
      {"huge", [](int64_t n) { return gaussian(n, 2, 1e30f); }},
      {"tiny", [](int64_t n) { return gaussian(n, 3, 1e-30f); }},
      {"subnormal", [](int64_t n) { return gaussian(n, 4, 1e-40f); }},
      {"wide", [](int64_t n) {  // magnitudes 1e-38 .. 1e38 mixed within blocks
         std::vector<float> x = gaussian(n, 5);
         std::mt19937 rng(6);
         std::uniform_real_distribution<float> u(-38, 38);
         for (float& v : x) v *= std::pow(10.0f, u(rng));
         return x;
       }},
      {"extremes", [](int64_t n) {
         const float v[] = {FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_TRUE_MIN, 1.0f, 0.0f, 3e38f};
         std::vector<float> x(static_cast<size_t>(n));
         for (int64_t i = 0; i < n; ++i) x[size_t(i)] = v[i % 7];
         return x;
       }},
  };
  const int64_t blocks[] = {1, 32, 128, 1000};
  const int64_t sizes[] = {0, 1, 2, 31, 33, 127, 129, 1000, 2049};
  for (StageId f : kAll) {
    for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
      for (const Input& in : inputs) {
        for (int64_t block : blocks) {
          for (int64_t n : sizes) {
            check_round_trip(f, r, in.make(n), block, in.what);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(Quantize, RelativeL2ErrorOnGaussian) {
  // Block 128, 2^16 values. Derivations (nearest rounding, error uniform over a step):
  //  int8: rms = s/sqrt(12), s = a/127, a ~ 2.9 sigma for 128 Gaussians -> 0.66%; bound 1%.
  //  int4: same with s = a/7 -> 12%; bound 14%.
  //  fp8:  3 mantissa bits, relative rms ~ 2^-4/sqrt(3) * 0.75 -> ~2.7%; bound 3.5%.
  //  fp4:  power-of-two grid, relative error <= 1/3, rms ~ 18%; bound 22%.
  //  fp16 / bf16: bounded per element by 2^-11 / 2^-8.
  const std::vector<float> x = gaussian(1 << 16, 11);
  const struct { StageId f; double bound; } cases[] = {
      {F::kInt8, 0.01}, {F::kInt4, 0.14}, {F::kFp8, 0.035}, {F::kFp4, 0.22},
      {F::kFp16, std::ldexp(1.0, -11)}, {F::kBf16, std::ldexp(1.0, -8)}};
  for (const auto& c : cases) {
    const double e = rel_l2(x, dec(c.f, enc(c.f, x, 128), int64_t(x.size()), 128));
    EXPECT_LE(e, c.bound) << name(c.f);
    EXPECT_GT(e, c.bound / 20) << name(c.f) << ": suspiciously exact";
    RecordProperty(name(c.f) + "_rel_l2", std::to_string(e));
  }
}

// ---- fp4 (E3M0) thresholds, oracle 12 ------------------------------------------------------

TEST(Quantize, Fp4RoundsAtTheDocumentedThresholds) {
  for (int e : {0, 5, -20, 100, 127, -100, -101, -120, -128}) {
    SCOPED_TRACE("E=" + std::to_string(e));
    const float top = std::ldexp(1.0f, e);  // absmax exactly 2^E -> block exponent E
    std::vector<float> x = {top};
    std::vector<float> want = {top};
    for (int j = e - 6; j < e; ++j) {
      const float p = std::ldexp(1.0f, j), mid = 1.5f * p;
      if (p == 0 || mid == p) continue;  // below the float range
      x.insert(x.end(), {p, -p, mid, std::nextafter(mid, 0.0f)});
      want.insert(want.end(), {p, -p, 2 * p, p});
    }
    const float lo = std::ldexp(1.0f, e - 6), half = std::ldexp(1.0f, e - 7);
    if (half > 0) {
      x.insert(x.end(), {half, -half, std::nextafter(half, 0.0f), 0.0f, -0.0f});
      want.insert(want.end(), {lo, -lo, 0.0f, 0.0f, -0.0f});
    }
    const int64_t n = static_cast<int64_t>(x.size());
    const Bytes b = enc(F::kFp4, x.data(), n, n);
    EXPECT_EQ(static_cast<int8_t>(b[0]), e);
    const std::vector<float> y = dec(F::kFp4, b, n, n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(y[i], want[i]) << "x=" << x[i];
      EXPECT_EQ(std::signbit(y[i]), std::signbit(want[i])) << "x=" << x[i];
    }
  }
}

TEST(Quantize, Fp4SaturatesAndFlushesAtTheExponentLimits) {
  // a > 2^127: E clamps to 127 and the top value saturates at 2^127.
  std::vector<float> x = {FLT_MAX, -1.6e38f, 1e37f};
  Bytes b = enc(F::kFp4, x, 3);
  EXPECT_EQ(static_cast<int8_t>(b[0]), 127);
  std::vector<float> y = dec(F::kFp4, b, 3, 3);
  EXPECT_EQ(y[0], std::ldexp(1.0f, 127));
  EXPECT_EQ(y[1], -std::ldexp(1.0f, 127));
  EXPECT_EQ(y[2], std::ldexp(1.0f, 123));  // 1e37 = 1.18 * 2^123
  // a < 2^-128: E clamps to -128; values below 2^-135 flush to zero.
  x = {std::ldexp(1.0f, -130), std::ldexp(1.0f, -136), -FLT_TRUE_MIN};
  b = enc(F::kFp4, x, 3);
  EXPECT_EQ(static_cast<int8_t>(b[0]), -128);
  y = dec(F::kFp4, b, 3, 3);
  EXPECT_EQ(y[0], std::ldexp(1.0f, -130));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_TRUE(std::signbit(y[2]));
  // Every exponent byte decodes (subnormal or zero magnitudes included).
  for (int e = -128; e <= 127; ++e) {
    const Bytes rec = {static_cast<uint8_t>(static_cast<int8_t>(e)), 0xf7, 0x81};
    y = dec(F::kFp4, rec, 4, 4);
    EXPECT_EQ(y[0], std::ldexp(1.0f, e));
    EXPECT_EQ(y[1], -std::ldexp(1.0f, e));
    EXPECT_EQ(y[2], std::ldexp(1.0f, e - 6));
    EXPECT_EQ(y[3], -0.0f);
    EXPECT_TRUE(std::signbit(y[3]));
  }
}

// ---- NaN / Inf rule -------------------------------------------------------------------------

TEST(Quantize, NonFiniteInputsFollowTheRule) {
  std::vector<float> x = gaussian(40, 21);
  x[0] = kNaN;
  x[5] = kInf;
  x[17] = -kInf;
  x[33] = -kNaN;
  std::vector<float> zeroed = x;
  for (float& v : zeroed) v = std::isfinite(v) ? v : 0.0f;
  for (StageId f : kBlockwise) {
    for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
      // Non-finite values neither move the scale nor appear: same bytes as zeros in place.
      const Bytes b = enc(f, x, 16, r, 3);
      EXPECT_EQ(b, enc(f, zeroed, 16, r, 3)) << name(f);
      const std::vector<float> y = dec(f, b, 40, 16);
      for (int i : {0, 5, 17, 33}) EXPECT_EQ(std::bit_cast<uint32_t>(y[i]), 0u) << name(f);
    }
    // A block of nothing but non-finite values is a zero block.
    const std::vector<float> bad = {kNaN, kInf, -kInf};
    const std::vector<float> y = dec(f, enc(f, bad, 3), 3, 3);
    for (float v : y) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u) << name(f);
  }
  const std::vector<float> c = {kNaN, -kNaN, kInf, -kInf, 1e6f, -1e6f, 65520.0f, 65519.0f};
  std::vector<float> y = dec(F::kFp16, enc(F::kFp16, c, 1), 8, 1);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_TRUE(std::signbit(y[1]));
  EXPECT_EQ(y[2], kInf);
  EXPECT_EQ(y[3], -kInf);
  EXPECT_EQ(y[4], kInf);    // overflow
  EXPECT_EQ(y[5], -kInf);
  EXPECT_EQ(y[6], kInf);    // the first value that rounds past 65504
  EXPECT_EQ(y[7], 65504.0f);
  y = dec(F::kBf16, enc(F::kBf16, c, 1), 8, 1);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_EQ(y[2], kInf);
  EXPECT_EQ(y[3], -kInf);
  // Signalling NaN stays NaN (the quiet bit is set, low mantissa bits would round away).
  y = dec(F::kBf16, enc(F::kBf16, std::vector<float>{std::bit_cast<float>(0x7f800001u)}, 1), 1, 1);
  EXPECT_TRUE(std::isnan(y[0]));
}

TEST(Quantize, HugeBlocksDecodeFinite) {
  // A block near FLT_MAX: qmax * scale must not round past FLT_MAX on decode.
  const std::vector<float> x = {FLT_MAX, -FLT_MAX, std::nextafter(FLT_MAX, 0.0f), 1.0f};
  for (StageId f : kBlockwise) {
    for (float v : dec(f, enc(f, x, 4), 4, 4)) EXPECT_TRUE(std::isfinite(v)) << name(f);
  }
}

// ---- stochastic rounding --------------------------------------------------------------------

// Distance between the two codes that bracket x (stochastic rounding picks one of them).
double code_step(StageId f, double x, double absmax, int e) {
  const double ax = std::fabs(x);
  switch (f) {
    case F::kInt8: return absmax / 127;
    case F::kInt4: return absmax / 7;
    case F::kFp8: {
      const double s = absmax / 448, y = ax / s;
      return y >= std::ldexp(1.0, -6) ? std::ldexp(s, std::ilogb(y) - 3) : std::ldexp(s, -9);
    }
    default: {  // fp4: between powers of two, or between 0 and 2^(E-6)
      const double lo = std::ldexp(1.0, e - 6);
      return ax >= lo ? std::ldexp(1.0, std::ilogb(ax)) : lo;
    }
  }
}

TEST(Quantize, StochasticRoundingIsUnbiased) {
  const int64_t n = 64;
  const int kSeeds = 4000;
  const std::vector<float> x = gaussian(n, 31);
  const double am = finite_absmax(x.data(), n);
  for (StageId f : kBlockwise) {
    const int e = f == F::kFp4 ? fp4_exponents(enc(f, x, n), n, n)[0] : 0;
    std::vector<double> mean(size_t(n), 0.0);
    for (int s = 0; s < kSeeds; ++s) {
      const std::vector<float> y = dec(f, enc(f, x, n, Rounding::kStochastic, 1000 + s), n, n);
      for (int64_t i = 0; i < n; ++i) mean[size_t(i)] += y[size_t(i)] / kSeeds;
    }
    const std::vector<float> nearest = dec(f, enc(f, x, n), n, n);
    int biased_nearest = 0;
    for (int64_t i = 0; i < n; ++i) {
      // A two-point draw has sd <= step/2; allow 5 standard errors of the mean.
      const double tol = 5 * code_step(f, x[i], am, e) / 2 / std::sqrt(double(kSeeds));
      EXPECT_NEAR(mean[size_t(i)], x[i], tol) << name(f) << " i=" << i;
      biased_nearest += std::fabs(nearest[size_t(i)] - double(x[i])) > tol;
    }
    // The check has teeth: round-to-nearest would fail it on most elements.
    EXPECT_GT(biased_nearest, n / 2) << name(f);
  }
}

TEST(Quantize, StochasticRoundingIsDeterministicPerSeed) {
  const std::vector<float> x = gaussian(1000, 41);
  for (StageId f : kBlockwise) {
    const Bytes a = enc(f, x, 128, Rounding::kStochastic, 7);
    EXPECT_EQ(a, enc(f, x, 128, Rounding::kStochastic, 7)) << name(f);
    EXPECT_NE(a, enc(f, x, 128, Rounding::kStochastic, 8)) << name(f);
    EXPECT_NE(a, enc(f, x, 128, Rounding::kNearest, 7)) << name(f);
  }
  // Rounding mode and seed do not matter to the casts.
  EXPECT_EQ(enc(F::kFp16, x, 1, Rounding::kStochastic, 9), enc(F::kFp16, x, 1));
}

TEST(Quantize, PiecesAtBlockBoundariesEqualOnePiece) {
  const std::vector<float> x = gaussian(1000, 51);
  const int64_t n = 1000;
  for (StageId f : kAll) {
    for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
      for (int64_t block : {int64_t{32}, int64_t{33}, int64_t{1000}}) {
        // Offsets near 2^32 cross the generator's segment boundary inside a block.
        for (int64_t base : {int64_t{0}, (int64_t{1} << 32) - 100}) {
          const int64_t k = block == 1000 ? 0 : 9 * block;
          const Bytes whole = enc(f, x.data(), n, block, r, 5, base);
          const Bytes p1 = enc(f, x.data(), k, block, r, 5, base);
          const Bytes p2 = enc(f, x.data() + k, n - k, block, r, 5, base + k);
          EXPECT_EQ(whole, cat({p1, p2})) << name(f) << " block=" << block << " base=" << base;
        }
      }
    }
  }
  // The offset is what makes the pieces line up: the wrong offset gives other bits.
  for (StageId f : kBlockwise) {
    const Bytes whole = enc(f, x.data(), n, 32, Rounding::kStochastic, 5, 0);
    const Bytes p2 = enc(f, x.data() + 320, n - 320, 32, Rounding::kStochastic, 5, 0);
    EXPECT_FALSE(std::equal(p2.begin(), p2.end(), whole.end() - p2.size())) << name(f);
  }
}

// ---- hostile bytes --------------------------------------------------------------------------

TEST(Quantize, DecodeRejectsWrongSizes) {
  const std::vector<float> x = gaussian(300, 61);
  for (StageId f : kAll) {
    Bytes b = enc(f, x, 128);
    std::vector<float> y(300);
    for (size_t size : {b.size() - 1, b.size() + 1, size_t{0}}) {
      Bytes c = b;
      c.resize(size);
      const Status st = decode(f, c.data(), c.size(), 300, 128, y.data());
      EXPECT_EQ(st.code(), StatusCode::kCorrupt) << name(f) << " size " << size;
    }
    EXPECT_EQ(decode(f, b.data(), b.size(), 301, 128, y.data()).code(), StatusCode::kCorrupt);
  }
}

TEST(Quantize, DecodeRejectsImpossibleScalesAndCodes) {
  const std::vector<float> x = gaussian(257, 71);  // 3 blocks of 128: the last has 1 value
  std::vector<float> y(257);
  auto corrupt_after = [&](StageId f, auto&& edit) {
    Bytes b = enc(f, x, 128);
    edit(b);
    return decode(f, b.data(), b.size(), 257, 128, y.data()).code() == StatusCode::kCorrupt;
  };
  for (StageId f : {F::kInt8, F::kInt4, F::kFp8}) {
    const size_t rec = encoded_size(f, 128, 128);
    for (float bad : {kNaN, kInf, -kInf, -1.0f, -0.0f, -FLT_TRUE_MIN}) {
      for (size_t at : {size_t{0}, rec, 2 * rec}) {
        EXPECT_TRUE(corrupt_after(f, [&](Bytes& b) { std::memcpy(&b[at], &bad, 4); }))
            << name(f) << " scale " << bad << " at " << at;
      }
    }
    EXPECT_FALSE(corrupt_after(f, [](Bytes&) {})) << name(f);
  }
  EXPECT_TRUE(corrupt_after(F::kInt8, [](Bytes& b) { b[4 + 17] = 0x80; }));   // -128
  EXPECT_TRUE(corrupt_after(F::kInt8, [](Bytes& b) { b.back() = 0x80; }));
  EXPECT_TRUE(corrupt_after(F::kInt4, [](Bytes& b) { b[4 + 3] = 0x18; }));    // low 0x8
  EXPECT_TRUE(corrupt_after(F::kInt4, [](Bytes& b) { b[4 + 63] = 0x81; }));   // high 0x8
  EXPECT_TRUE(corrupt_after(F::kInt4, [](Bytes& b) { b.back() |= 0x10; }));   // pad nibble
  EXPECT_TRUE(corrupt_after(F::kFp8, [](Bytes& b) { b[4 + 5] = 0x7f; }));     // NaN
  EXPECT_TRUE(corrupt_after(F::kFp8, [](Bytes& b) { b[4 + 5] = 0xff; }));     // -NaN
  EXPECT_TRUE(corrupt_after(F::kFp4, [](Bytes& b) { b.back() |= 0x30; }));    // pad nibble
  EXPECT_FALSE(corrupt_after(F::kFp4, [](Bytes& b) { b[0] = 0x80; }));        // E = -128 ok
  EXPECT_FALSE(corrupt_after(F::kInt4, [](Bytes& b) { b[4 + 3] = 0x99; }));   // -7, -7 ok
}

TEST(Quantize, DecodeSurvivesRandomAndMutatedBytes) {
  std::mt19937_64 rng(81);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  constexpr int kGuard = 8;
  const float kCanary = -777.0f;
  int ok = 0, bad = 0;
  for (StageId f : kAll) {
    for (int it = 0; it < 3000; ++it) {
      const int64_t n = pick(0, 300), block = pick(1, 70);
      Bytes b;
      if (it % 2 == 0) {  // random bytes, mostly of the right size
        const size_t want = encoded_size(f, n, block);
        const size_t size = it % 10 == 0 ? size_t(pick(0, int64_t(want) + 8)) : want;
        b.resize(size);
        for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
        if (it % 4 == 0 && f != F::kFp16 && f != F::kBf16) {  // plausible scales, random codes
          for (size_t at = 0; at + 4 <= b.size(); at += 4) b[at + 3] &= 0x3f;
        }
      } else {  // a valid encoding with a few bytes changed
        const std::vector<float> x = gaussian(n, uint64_t(it));
        b = enc(f, x, block, it % 3 ? Rounding::kNearest : Rounding::kStochastic, uint64_t(it));
        for (int k = pick(1, 3); k > 0 && !b.empty(); --k) {
          b[size_t(pick(0, int64_t(b.size()) - 1))] = static_cast<uint8_t>(rng());
        }
      }
      std::vector<float> y(size_t(n) + kGuard, kCanary);
      const Status st = decode(f, b.data(), b.size(), n, block, y.data());
      ASSERT_TRUE(st.is_ok() || st.code() == StatusCode::kCorrupt) << st.to_string();
      (st.is_ok() ? ok : bad)++;
      for (int g = 0; g < kGuard; ++g) ASSERT_EQ(y[size_t(n) + g], kCanary) << name(f);
      if (st.is_ok() && f != F::kFp16 && f != F::kBf16) {
        for (int64_t i = 0; i < n; ++i) ASSERT_FALSE(std::isnan(y[size_t(i)])) << name(f);
      }
    }
  }
  EXPECT_GT(ok, 1000);  // both outcomes are exercised
  EXPECT_GT(bad, 1000);
}

}  // namespace
}  // namespace atl::compression::quant
