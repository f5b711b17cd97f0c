// docs/algorithms.md §9 oracles for compression: 14 (DCT matrices orthonormal, round trip),
// 15 (sc(d)), 18 (error feedback identity), 20 (topk payload bytes, adapted to varint
// indices: payload = sum of varint lengths of the index gaps + value bytes). Oracle 19 is
// DeMo's all-gather averaging, tested with DeMo. Plus the sparsifiers' own contracts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "compression/chain.h"
#include "compression/dct.h"
#include "compression/error_feedback.h"
#include "compression/frame.h"
#include "compression/quantize.h"
#include "compression/sparse.h"
#include "tests/compression/test_util.h"

namespace atl::compression {
namespace {

using namespace test;  // NOLINT

// Oracle 14: C C^T = I within 1e-6 for every length a flat buffer can use.
TEST(Oracle14, DctMatricesAreOrthonormal) {
  for (int64_t n : {1, 2, 3, 7, 8, 48, 63, 64, 127, 128, 256}) {
    const float* c = dct_matrix(n);
    double worst = 0;
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        double dot = 0;
        for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(c[a * n + j]) * c[b * n + j];
        worst = std::max(worst, std::fabs(dot - (a == b ? 1.0 : 0.0)));
      }
    }
    EXPECT_LE(worst, 1e-6) << "n = " << n;
    EXPECT_NEAR(c[0], 1.0 / std::sqrt(static_cast<double>(n)), 1e-7);  // C[0, j] = 1/sqrt(n)
  }
  EXPECT_THROW(dct_matrix(0), std::invalid_argument);
  EXPECT_THROW(dct_matrix(kMaxDctChunk + 1), std::invalid_argument);
}

// Oracle 14: round trips of 1-D buffers with chunk sizes from sc(d), and of the rows of a
// 2-D tensor chunked per §4.2 (C_n1 B C_n2^T, built here from the 1-D transform).
TEST(Oracle14, DctRoundTrips) {
  for (int64_t d : {96, 896, 1000, 2048}) {
    const int64_t s = dct_divisor_chunk(d, 64);
    std::vector<float> x = make_input(Input::kRandom, d, static_cast<uint64_t>(d));
    std::vector<float> y(x.size()), z(x.size());
    dct_forward(x.data(), d, s, y.data());
    dct_inverse(y.data(), d, s, z.data());
    double e = 0, ex = 0, ey = 0;
    for (int64_t i = 0; i < d; ++i) {
      e = std::max(e, std::fabs(static_cast<double>(z[i]) - x[i]));
      ex += static_cast<double>(x[i]) * x[i];
      ey += static_cast<double>(y[i]) * y[i];
    }
    EXPECT_LE(e, 1e-5) << d;
    EXPECT_NEAR(ey, ex, 1e-4 * ex) << "Parseval, d = " << d;
    dct_forward(x.data(), d, s, x.data());  // in place
    EXPECT_EQ(x, y);
  }
  // 2-D (r, c) = (96, 896): n1 = sc(96) = 48, n2 = sc(896) = 64. Transform rows with C_n2,
  // then columns with C_n1, invert in the other order.
  const int64_t r = 96, cols = 896, n1 = dct_divisor_chunk(r, 64), n2 = dct_divisor_chunk(cols, 64);
  at::Tensor b = at::randn({r, cols});
  at::Tensor t = b.clone();
  for (int64_t i = 0; i < r; ++i) dct_forward(t[i].data_ptr<float>(), cols, n2, t[i].data_ptr<float>());
  at::Tensor tt = t.t().contiguous();
  for (int64_t j = 0; j < cols; ++j) dct_forward(tt[j].data_ptr<float>(), r, n1, tt[j].data_ptr<float>());
  // Reference: C_n1 B C_n2^T on block (0, 0).
  at::Tensor c1 = at::from_blob(const_cast<float*>(dct_matrix(n1)), {n1, n1}).clone();
  at::Tensor c2 = at::from_blob(const_cast<float*>(dct_matrix(n2)), {n2, n2}).clone();
  at::Tensor ref = c1.matmul(b.narrow(0, 0, n1).narrow(1, 0, n2)).matmul(c2.t());
  EXPECT_TRUE(at::allclose(tt.t().narrow(0, 0, n1).narrow(1, 0, n2), ref, 1e-4, 1e-5));
  for (int64_t j = 0; j < cols; ++j) dct_inverse(tt[j].data_ptr<float>(), r, n1, tt[j].data_ptr<float>());
  t = tt.t().contiguous();
  for (int64_t i = 0; i < r; ++i) dct_inverse(t[i].data_ptr<float>(), cols, n2, t[i].data_ptr<float>());
  EXPECT_TRUE(at::allclose(t, b, 1e-4, 1e-5));
}

// Oracle 15: sc(d) is the largest divisor of d that is <= s.
TEST(Oracle15, DivisorChunk) {
  EXPECT_EQ(dct_divisor_chunk(2048, 64), 64);
  EXPECT_EQ(dct_divisor_chunk(896, 64), 64);
  EXPECT_EQ(dct_divisor_chunk(96, 64), 48);
  EXPECT_EQ(dct_divisor_chunk(1009, 64), 1);  // prime
  EXPECT_EQ(dct_divisor_chunk(1000003, 64), 1);
  EXPECT_EQ(dct_divisor_chunk(10, 64), 10);
  EXPECT_EQ(dct_divisor_chunk(1, 64), 1);
  // The flat-buffer stage uses fixed chunks instead, so a prime length still compresses:
  // a smooth signal of prime length keeps almost all its energy in 5% of the coefficients.
  const int64_t n = 1009;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
  const Pipeline p = make({dct(64), topk(0.05)});
  const std::vector<float> y = decode(p, encode(p, x), n);
  double err = 0, total = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (y[i] - x[i]) * (y[i] - x[i]);
    total += x[i] * x[i];
  }
  EXPECT_LT(err, 1e-3 * total);
}

// Oracle 18: compensated = transmitted + residual, exactly, for nearest-rounding codecs
// (the subtraction is exact by Sterbenz's lemma when transmitted is 0 or within a factor
// 2 of compensated), and the residual carries over to the next round.
TEST(Oracle18, ErrorFeedbackIdentity) {
  for (const auto& stages : {std::vector<StageConfig>{topk(0.1)},
                             std::vector<StageConfig>{quantizer(StageId::kInt8, 64)},
                             std::vector<StageConfig>{quantizer(StageId::kFp4, 32), zstd()},
                             std::vector<StageConfig>{randk(0.2), quantizer(StageId::kInt4, 32)}}) {
    const Pipeline p = make(stages);
    SCOPED_TRACE(p.describe());
    ErrorFeedback ef;
    at::Tensor previous_residual;
    for (int round = 0; round < 3; ++round) {
      const std::vector<float> g = make_input(Input::kRandom, 1000, 100 + round);
      at::Tensor x = tensor_of(g);
      ef.compensate(x);
      if (round == 0) EXPECT_TRUE(at::equal(x, tensor_of(g)));  // residual starts at 0
      else EXPECT_TRUE(at::equal(x, tensor_of(g) + previous_residual));
      Bytes frame;
      p.encode(x, frame, round);
      at::Tensor sent = at::empty({1000});
      ASSERT_TRUE(p.decode(frame.data(), frame.size(), sent).is_ok());
      ef.update(x, sent);
      EXPECT_TRUE(at::equal(sent + ef.residual(), x)) << "round " << round;
      previous_residual = ef.residual().clone();
    }
    ErrorFeedback restored;
    restored.load(previous_residual);
    EXPECT_TRUE(at::equal(restored.residual(), previous_residual));
  }
}

size_t varint_len(uint32_t g) { return g < (1u << 7) ? 1 : g < (1u << 14) ? 2 : g < (1u << 21) ? 3 : g < (1u << 28) ? 4 : 5; }

// Oracle 20, adapted: payload bytes of topk = sum over kept indices of the varint length of
// the gap to the previous one (g_0 = i_0, g_j = i_j - i_{j-1} - 1) + the values' bytes. With
// gaps below 128 that is k * (1 + value bytes), §9's n_chunks * k * (idx + val) per tensor.
TEST(Oracle20, TopkPayloadBytes) {
  const int64_t n = 5000, k = 500;
  std::vector<float> x = make_input(Input::kRandom, n);
  for (auto& v : x) v *= 0.01f;
  for (int64_t j = 0; j < k; ++j) x[static_cast<size_t>(j * 10)] = 100.0f + static_cast<float>(j);
  for (const auto& [q, value_bytes] :
       std::vector<std::pair<std::vector<StageConfig>, size_t>>{
           {{}, 4 * k}, {{st(StageId::kBf16)}, 2 * k},
           {{quantizer(StageId::kInt8, 100)}, quant::encoded_size(StageId::kInt8, k, 100)}}) {
    std::vector<StageConfig> stages = {topk_count(k)};
    stages.insert(stages.end(), q.begin(), q.end());
    const Pipeline p = make(stages);
    const Bytes f = encode(p, x);
    FrameView v;
    ASSERT_TRUE(parse_frame(f.data(), f.size(), &v).is_ok());
    EXPECT_EQ(v.header.payload_size, static_cast<uint64_t>(k) * 1 + value_bytes) << p.describe();
  }
  // Random positions: the sum-of-varint-lengths formula.
  std::vector<float> r = make_input(Input::kRandom, 300000, 5);
  const Pipeline p = make({topk(0.01)});
  const int64_t kk = kept_count(p.stages()[0], 300000);
  std::vector<uint32_t> idx(static_cast<size_t>(kk));
  topk_indices(r.data(), 300000, kk, idx.data());
  size_t expect = 4 * static_cast<size_t>(kk);
  for (int64_t j = 0; j < kk; ++j) expect += varint_len(j ? idx[j] - idx[j - 1] - 1 : idx[0]);
  const Bytes f = encode(p, r);
  EXPECT_EQ(f.size(), kMinFrameHeaderBytes + stage_wire_bytes(StageId::kTopK) + expect);
  // randk: only the values travel.
  const Pipeline rk = make({randk(0.01)});
  EXPECT_EQ(encode(rk, r, 3).size(), kMinFrameHeaderBytes + stage_wire_bytes(StageId::kRandK) + 4 * 3000);
}

TEST(Sparse, VarintEdgesAndHostileIndices) {
  const uint32_t idx[] = {0, 127, 255, 16639, 2147483647u};  // gaps 0, 126, 127, 16383, max
  uint8_t buf[32];
  const size_t len = encode_varint_indices(idx, 5, buf);
  EXPECT_EQ(len, varint_index_bytes(idx, 5));
  EXPECT_EQ(len, 1u + 1 + 1 + 2 + 5);
  uint32_t back[5];
  ASSERT_TRUE(decode_varint_indices(buf, len, 5, int64_t{1} << 31, back).is_ok());
  EXPECT_TRUE(std::equal(idx, idx + 5, back));
  EXPECT_EQ(decode_varint_indices(buf, len, 5, 2147483647, back).code(), StatusCode::kCorrupt);  // past n
  EXPECT_EQ(decode_varint_indices(buf, len - 1, 5, int64_t{1} << 31, back).code(), StatusCode::kCorrupt);
  EXPECT_EQ(decode_varint_indices(buf, len, 4, int64_t{1} << 31, back).code(), StatusCode::kCorrupt);  // left over
  const uint8_t overlong[] = {0x80, 0x00};  // 0 in two bytes
  EXPECT_NE(decode_varint_indices(overlong, 2, 1, 10, back).message().find("non-minimal"), std::string::npos);
  const uint8_t six[] = {0x81, 0x80, 0x80, 0x80, 0x80, 0x01};
  EXPECT_NE(decode_varint_indices(six, 6, 1, 10, back).message().find("longer than 5"), std::string::npos);
}

TEST(Sparse, TopkTiesNanAndInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1, -3, 3, nan, 2, -inf, 3, 0};
  uint32_t idx[4];
  topk_indices(x.data(), 8, 4, idx);  // NaN, -Inf, then the first two of the three |3|s
  EXPECT_EQ(std::vector<uint32_t>(idx, idx + 4), (std::vector<uint32_t>{1, 2, 3, 5}));
  uint32_t all[8];
  topk_indices(x.data(), 8, 8, all);  // k == n takes everything
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(all[i], i);
}

TEST(Sparse, RandkIsSeededSortedDistinctAndUniform) {
  const int64_t n = 100, k = 10;
  std::vector<int> hits(n, 0);
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    uint32_t idx[k];
    randk_indices(seed, n, k, idx);
    for (int64_t j = 1; j < k; ++j) ASSERT_LT(idx[j - 1], idx[j]);
    ASSERT_LT(idx[k - 1], n);
    for (uint32_t i : idx) ++hits[i];
    uint32_t again[k];
    randk_indices(seed, n, k, again);
    ASSERT_TRUE(std::equal(idx, idx + k, again));
  }
  // Each position is kept with probability k/n = 0.1: 400 expected hits, sd ~19.
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(hits[i], 400, 100) << i;
  uint32_t a[k], b[k];
  randk_indices(1, n, k, a);
  randk_indices(2, n, k, b);
  EXPECT_FALSE(std::equal(a, a + k, b));
  // The decoder regenerates the positions from the frame's seed.
  const Pipeline p = make({randk(0.1)});
  const std::vector<float> x = make_input(Input::kRandom, 1000);
  const std::vector<float> y7 = decode(p, encode(p, x, 7), 1000);
  const std::vector<float> y8 = decode(p, encode(p, x, 8), 1000);
  EXPECT_NE(y7, y8);
}

}  // namespace
}  // namespace atl::compression
