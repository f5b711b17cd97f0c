// The lut2 quantizer (compression/lut2.h) against a float64 recomputation of Templar's
// formula, its byte layout, and its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compression/lut2.h"

namespace atl::compression {
namespace {

float f32_at(const std::vector<uint8_t>& b, size_t at) {
  float v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

// Encodes x and returns the bytes, checking their size.
std::vector<uint8_t> encode(const std::vector<float>& x) {
  std::vector<uint8_t> out(lut2::encoded_size(static_cast<int64_t>(x.size())));
  lut2::encode(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

TEST(Lut2, MatchesAFloat64RecomputationOfTheFormula) {
  std::mt19937_64 rng(11);
  for (int64_t m : {2, 7, 64, 1000, 4097}) {
    std::normal_distribution<float> normal(0.3f, 2.0f);
    std::vector<float> x(static_cast<size_t>(m));
    for (auto& v : x) v = normal(rng);
    x[0] = 40.0f;  // an outlier: clamped into the top bin
    const std::vector<uint8_t> bytes = encode(x);
    ASSERT_EQ(bytes.size(), 20u + static_cast<size_t>((m + 3) / 4));

    // The oracle: shift, unbiased sigma, scale = 6 sigma / 4, bins, bin means (float64).
    double mean = 0;
    for (float v : x) mean += v;
    mean /= static_cast<double>(m);
    double sq = 0;
    for (float v : x) sq += (v - mean) * (v - mean);
    const double scale = 6.0 * std::sqrt(sq / static_cast<double>(m - 1)) / 4.0;
    EXPECT_NEAR(f32_at(bytes, 0), mean, 1e-5 * (1 + std::fabs(mean)));
    std::vector<int> bin(static_cast<size_t>(m));
    double sums[4] = {0, 0, 0, 0};
    int counts[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < m; ++i) {
      const double pos = (x[i] - mean) / scale + 2;
      bin[i] = static_cast<int>(std::clamp(std::nearbyint(pos), 0.0, 3.0));
      const int code = (bytes[20 + i / 4] >> (2 * (i % 4))) & 3;
      // a value within float rounding of a bin edge may fall on either side
      if (std::fabs(pos - std::floor(pos) - 0.5) > 1e-4) {
        ASSERT_EQ(code, bin[i]) << "m=" << m << " value " << i << " = " << x[i];
      }
      bin[i] = code;
      sums[code] += x[i] - mean;
      ++counts[code];
    }
    // (with two values each is 0.47 scales from the mean: no value reaches an outer bin)
    if (m >= 7) {
      EXPECT_EQ(bin[0], 3) << "the outlier is clamped into the top bin";
    }
    for (int b = 0; b < 4; ++b) {
      const double want = counts[b] ? sums[b] / counts[b] : 0.0;
      EXPECT_NEAR(f32_at(bytes, 4 + 4 * b), want, 1e-5 * (1 + std::fabs(want))) << "bin " << b;
    }
    std::vector<float> y(static_cast<size_t>(m));
    ASSERT_TRUE(lut2::decode(bytes.data(), bytes.size(), m, y.data()).is_ok());
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_EQ(y[i], f32_at(bytes, 4 + 4 * bin[i]) + f32_at(bytes, 0)) << "value " << i;
    }
  }
}

TEST(Lut2, EdgeCasesAndNonFiniteValues) {
  // Values of both signs near the float limit: the table stays finite, the frame decodes.
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> extreme = {big, -big, -big, -big * 0.9f, big};
  auto e = encode(extreme);
  std::vector<float> ye(extreme.size());
  EXPECT_TRUE(lut2::decode(e.data(), e.size(), 5, ye.data()).is_ok());
  EXPECT_EQ(lut2::encoded_size(0), 0u);
  // One value: sigma is infinite, the scale falls back to 1, the value decodes exactly.
  std::vector<float> one = {3.25f}, y(1);
  auto b = encode(one);
  ASSERT_TRUE(lut2::decode(b.data(), b.size(), 1, y.data()).is_ok());
  EXPECT_EQ(y[0], 3.25f);
  // A constant vector decodes exactly; NaN and Inf decode finite and leave the rest alone.
  std::vector<float> x = {2.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f,
                          std::numeric_limits<float>::infinity(), 2.0f};
  b = encode(x);
  y.resize(x.size());
  ASSERT_TRUE(lut2::decode(b.data(), b.size(), 6, y.data()).is_ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], 2.0f) << i;
}

TEST(Lut2, RefusesWrongSizesNonFiniteTablesAndPadding) {
  const std::vector<float> x = {1, -2, 3, 0.5f, 7};  // 5 values: 2 code bytes, 6 padding bits
  const auto good = encode(x);
  std::vector<float> y(5);
  ASSERT_TRUE(lut2::decode(good.data(), good.size(), 5, y.data()).is_ok());
  EXPECT_FALSE(lut2::decode(good.data(), good.size() - 1, 5, y.data()).is_ok());
  EXPECT_FALSE(lut2::decode(good.data(), good.size(), 4, y.data()).is_ok());
  EXPECT_FALSE(lut2::decode(good.data(), good.size(), -1, y.data()).is_ok());
  auto bad = good;
  bad.back() |= 0x80;  // a padding bit
  EXPECT_FALSE(lut2::decode(bad.data(), bad.size(), 5, y.data()).is_ok());
  for (size_t at : {0u, 4u, 16u}) {  // shift, table[0], table[3]
    bad = good;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bad.data() + at, &nan, 4);
    EXPECT_FALSE(lut2::decode(bad.data(), bad.size(), 5, y.data()).is_ok()) << "field at " << at;
  }
}

}  // namespace
}  // namespace atl::compression
