// Conformance: the same checks over every registered stage and a list of pipelines, on
// random, zero, constant, huge, tiny and NaN/Inf inputs of odd lengths.
//
//  - round trip: bitwise for lossless pipelines ({} and {zstd}); for lossy ones the bounds
//    documented in compression/quantize.h (per value of a block with absmax a), topk/randk
//    send their positions exactly (unsent positions decode to +0), dct round-trips within
//    1e-5 of its chunk's absmax and a dct+topk error equals the energy of the unsent
//    coefficients (the DCT is orthonormal);
//  - NaN/Inf follow the stated rules (quantize.h, dct.h, sparse.h);
//  - deterministic: the same input and seed give the same bytes;
//  - idempotent where marked: encode(decode(encode(x))) decodes to the same values bitwise.
//    Holds for {}, {zstd}, fp16, bf16, topk, randk (same seed) and the nearest-rounding
//    blockwise quantizers with or without topk/zstd; not for dct (float round-off), for
//    stochastic rounding, or for pipelines combining them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compression/chain.h"
#include "compression/dct.h"
#include "compression/sparse.h"
#include "tests/compression/test_util.h"

namespace atl::compression {
namespace {

using namespace test;  // NOLINT

struct Case {
  std::string name;
  std::vector<StageConfig> stages;
  bool idempotent;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out = {{"fp32", {}, true}};
  for (const std::string& name : stage_names()) {  // every registered stage on its own
    StageId id{};
    stage_from_name(name, &id);
    // lut2 re-derives its bins from the decoded values (a smaller sigma), so it is not idempotent
    out.push_back({name, {default_stage(id)}, id != StageId::kDct && id != StageId::kLut2});
  }
  const StageConfig stoch = quantizer(StageId::kInt8, 128, Rounding::kStochastic);
  out.push_back({"int8_stochastic", {stoch}, false});
  out.push_back({"int4_block32_stochastic", {quantizer(StageId::kInt4, 32, Rounding::kStochastic)}, false});
  out.push_back({"dct_topk", {dct(), topk(0.1)}, false});
  out.push_back({"dct16_topk_fp8_zstd", {dct(16), topk(0.25), quantizer(StageId::kFp8), zstd(1)}, false});
  out.push_back({"int4_zstd", {quantizer(StageId::kInt4), zstd()}, true});
  out.push_back({"topk_int8_zstd", {topk(0.1), quantizer(StageId::kInt8), zstd()}, true});
  out.push_back({"topk_count_bf16", {topk_count(50), st(StageId::kBf16)}, true});
  out.push_back({"randk_int4", {randk(0.3), quantizer(StageId::kInt4, 64)}, true});
  out.push_back({"fp4_block32_zstd19", {quantizer(StageId::kFp4, 32), zstd(19)}, true});
  return out;
}

// ---- reference checks -----------------------------------------------------------------------

// |y - x| bound for value x of a block with finite absmax a, per quantize.h.
bool within_quant_bound(const StageConfig& q, float x, float y, double a) {
  if (!std::isfinite(x)) {
    if (q.id == StageId::kFp16 || q.id == StageId::kBf16) {
      return std::isnan(x) ? std::isnan(y) : y == x;
    }
    if (q.id == StageId::kLut2) return std::isfinite(y);  // the bin of the mean (lut2.h)
    return y == 0.0f;  // blockwise formats encode non-finite values as code 0
  }
  const double ax = std::fabs(x), err = std::fabs(static_cast<double>(y) - x);
  const bool stoch = q.rounding == Rounding::kStochastic;
  // Float rounding of x / s moves a code across a half-step by ~1e-5 of a step (quantize_test
  // uses the same 1e-4 relative slack); subnormal scales round in absolute terms.
  const double slack = 1e-44;
  switch (q.id) {
    case StageId::kFp16:
      if (ax >= 65520.0) return std::isinf(y) && std::signbit(y) == std::signbit(x);
      return ax >= std::ldexp(1.0, -14) ? err <= std::ldexp(ax, -11) : err <= std::ldexp(1.0, -25);
    case StageId::kBf16:
      if (ax >= 3.3961e38) return std::isinf(y) && std::signbit(y) == std::signbit(x);
      return ax >= std::ldexp(1.0, -126) ? err <= std::ldexp(ax, -8) : err <= std::ldexp(1.0, -134);
    case StageId::kInt8: return err <= a / (stoch ? 127.0 : 254.0) * (1 + 1e-4) + 128 * slack;
    case StageId::kInt4: return err <= a / (stoch ? 7.0 : 14.0) * (1 + 1e-4) + 8 * slack;
    case StageId::kFp8:
      return err <= std::max(ax / 16.0, std::ldexp(a / 448.0, -10)) * (1 + 1e-4) + 448 * slack;
    case StageId::kFp4: {
      if (a == 0) return y == 0.0f;
      const int e = std::clamp(static_cast<int>(std::ceil(std::log2(a))), -128, 127);
      if (ax >= std::ldexp(1.0, e - 6)) return err <= ax / 3.0 * (1 + 1e-4) + slack;
      return err <= std::ldexp(1.0, e - 7) * (1 + 1e-4) + slack;
    }
    // lut2 (one table per frame; a is the frame's absmax): a value decodes to the mean of its
    // bin, so the error is at most the spread of the finite values, <= 2a
    case StageId::kLut2: return err <= 2 * a * (1 + 1e-5) + slack;
    default: return false;
  }
}

// Checks the decoded values yk of the values xk that travel, block by block.
void check_values(const StageConfig* q, const std::vector<float>& xk, const std::vector<float>& yk) {
  ASSERT_EQ(xk.size(), yk.size());
  if (!q) {
    for (size_t i = 0; i < xk.size(); ++i) {
      ASSERT_TRUE(same_bits(xk[i], yk[i])) << "value " << i << ": " << xk[i] << " -> " << yk[i];
    }
    return;
  }
  const bool blockwise = q->id != StageId::kFp16 && q->id != StageId::kBf16 && q->id != StageId::kLut2;
  const size_t block = blockwise ? static_cast<size_t>(q->block) : xk.size() + 1;
  for (size_t b = 0; b < xk.size(); b += block) {
    const size_t e = std::min(xk.size(), b + block);
    double a = 0;
    for (size_t i = b; i < e; ++i) {
      if (std::isfinite(xk[i])) a = std::max(a, std::fabs(static_cast<double>(xk[i])));
    }
    for (size_t i = b; i < e; ++i) {
      ASSERT_TRUE(within_quant_bound(*q, xk[i], yk[i], a))
          << stage_name(q->id) << " value " << i << ": " << xk[i] << " -> " << yk[i] << " (absmax " << a << ")";
    }
  }
}

// Independent topk oracle: sort by (|x| bits descending, index ascending).
std::vector<uint32_t> oracle_topk(const std::vector<float>& x, int64_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  auto key = [&](uint32_t i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    return b & 0x7fffffffu;
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](uint32_t a, uint32_t b) {
    return key(a) != key(b) ? key(a) > key(b) : a < b;
  });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

// DCT coefficients in double, straight from the docs/algorithms.md §4.2 formula (fixed chunks + tail).
std::vector<double> oracle_dct(const std::vector<float>& x, int64_t s) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> c(x.size());
  std::vector<double> m;
  int64_t m_len = 0;
  for (int64_t b = 0; b < n; b += s) {
    const int64_t len = std::min(s, n - b);
    if (len != m_len) {  // C_len[f, j], row-major
      m.assign(static_cast<size_t>(len * len), 0.0);
      for (int64_t f = 0; f < len; ++f) {
        for (int64_t j = 0; j < len; ++j) {
          m[f * len + j] = std::cos(M_PI * static_cast<double>((2 * j + 1) * f) / (2.0 * len)) *
                           std::sqrt(2.0 / len) * (f == 0 ? 1 / std::sqrt(2.0) : 1.0);
        }
      }
      m_len = len;
    }
    for (int64_t f = 0; f < len; ++f) {
      double acc = 0;
      for (int64_t j = 0; j < len; ++j) acc += m[f * len + j] * x[b + j];
      c[b + f] = acc;
    }
  }
  return c;
}

void check_dct(const Chain& chain, const std::vector<float>& x, const std::vector<float>& y, Input kind) {
  const StageConfig& t = *chain.slot(Slot::kTransform);
  const StageConfig* sparse = chain.slot(Slot::kSparsify);
  const int64_t n = static_cast<int64_t>(x.size());
  if (!sparse) {  // per chunk: non-finite in, all non-finite out; else within 1e-5 of absmax
    for (int64_t b = 0; b < n; b += t.chunk) {
      const int64_t e = std::min(n, b + t.chunk);
      bool finite = true;
      double a = 0;
      for (int64_t i = b; i < e; ++i) {
        finite = finite && std::isfinite(x[i]);
        a = std::max(a, std::fabs(static_cast<double>(x[i])));
      }
      for (int64_t i = b; i < e; ++i) {
        if (!finite) {
          ASSERT_FALSE(std::isfinite(y[i])) << "chunk at " << b;
        } else {
          ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), 1e-5 * a + 1e-38) << "element " << i;
        }
      }
    }
    return;
  }
  if (kind == Input::kSpecial) return;  // non-finite coefficients: decode must only succeed
  // Orthonormal: ||y - x||^2 = sum of unsent coefficients^2 (+ quantization error of sent).
  std::vector<double> c = oracle_dct(x, t.chunk);
  double total = 0, err = 0;
  for (double v : c) total += v * v;
  for (int64_t i = 0; i < n; ++i) err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
  std::vector<double> mag(c.size());
  for (size_t i = 0; i < c.size(); ++i) mag[i] = c[i] * c[i];
  const int64_t k = kept_count(*sparse, n);
  std::nth_element(mag.begin(), mag.begin() + k, mag.end(), std::greater<>());
  const double kept = std::accumulate(mag.begin(), mag.begin() + k, 0.0);
  const double unsent = total - kept;
  const double tol = (kind == Input::kTiny ? 1e-2 : 1e-3) * total + 1e-300;
  if (chain.slot(Slot::kQuantize)) {
    ASSERT_LE(err, unsent + kept / 200 + tol);  // fp8: relative error <= 2^-4 per coefficient
  } else {
    ASSERT_NEAR(err, unsent, tol);
  }
}

void check_round_trip(const Chain& chain, const std::vector<float>& x, const std::vector<float>& y,
                      uint64_t seed, Input kind) {
  ASSERT_EQ(x.size(), y.size());
  if (chain.slot(Slot::kTransform)) return check_dct(chain, x, y, kind);
  const StageConfig* sparse = chain.slot(Slot::kSparsify);
  if (!sparse) return check_values(chain.slot(Slot::kQuantize), x, y);
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t k = kept_count(*sparse, n);
  std::vector<uint32_t> idx(static_cast<size_t>(k));
  if (sparse->id == StageId::kTopK) idx = oracle_topk(x, k);
  else randk_indices(seed, n, k, idx.data());
  std::vector<float> xk, yk;
  std::vector<bool> sent(x.size(), false);
  for (uint32_t i : idx) {
    xk.push_back(x[i]);
    yk.push_back(y[i]);
    sent[i] = true;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (!sent[i]) {
      ASSERT_TRUE(same_bits(y[i], 0.0f)) << "unsent position " << i << " decoded " << y[i];
    }
  }
  check_values(chain.slot(Slot::kQuantize), xk, yk);
}

// ---- the suite ----------------------------------------------------------------------------

class Conformance : public ::testing::TestWithParam<Case> {};

TEST_P(Conformance, RoundTripBoundsDeterminismIdempotence) {
  const Case& c = GetParam();
  const Pipeline p = make(c.stages);
  const Chain chain = *make_chain(c.stages);
  EXPECT_EQ(p.lossless(), c.stages.empty() || (c.stages.size() == 1 && c.stages[0].id == StageId::kZstd));
  for (int64_t n : {0, 1, 127, 129, 1000003}) {
    for (Input kind : kAllInputs) {
      if (n == 1000003 && (kind == Input::kZero || kind == Input::kConstant)) continue;
      SCOPED_TRACE(c.name + " n=" + std::to_string(n) + " input=" + input_name(kind));
      const uint64_t seed = 1234 + static_cast<uint64_t>(n);
      const std::vector<float> x = make_input(kind, n);
      const Bytes frame = encode(p, x, seed);
      ASSERT_LE(frame.size(), p.max_encoded_size(n));
      ASSERT_EQ(encode(p, x, seed), frame) << "not deterministic";
      const std::vector<float> y = decode(p, frame, n);
      ASSERT_NO_FATAL_FAILURE(check_round_trip(chain, x, y, seed, kind));
      if (p.lossless() && n > 0) {
        ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
      }
      if (c.idempotent) {
        const std::vector<float> z = decode(p, encode(p, y, seed), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(same_bits(y[i], z[i])) << "not idempotent at " << i << ": " << y[i] << " -> " << z[i];
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPipelines, Conformance, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace atl::compression
