// Helpers shared by the compression tests: stage builders, the pipelines the conformance
// suite covers, input generators and encode/decode shorthands.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compression/pipeline.h"

namespace atl::compression::test {

using Bytes = std::vector<uint8_t>;

inline StageConfig st(StageId id) {
  StageConfig s;
  s.id = id;
  return s;
}
inline StageConfig topk(double fraction) {
  StageConfig s = st(StageId::kTopK);
  s.fraction = fraction;
  return s;
}
inline StageConfig topk_count(int64_t count) {
  StageConfig s = st(StageId::kTopK);
  s.count = count;
  return s;
}
inline StageConfig randk(double fraction) {
  StageConfig s = st(StageId::kRandK);
  s.fraction = fraction;
  return s;
}
inline StageConfig quantizer(StageId id, int64_t block = 128, Rounding r = Rounding::kNearest) {
  StageConfig s = st(id);
  s.block = block;
  s.rounding = r;
  return s;
}
inline StageConfig dct(int64_t chunk = 64) {
  StageConfig s = st(StageId::kDct);
  s.chunk = chunk;
  return s;
}
inline StageConfig zstd(int level = 3) {
  StageConfig s = st(StageId::kZstd);
  s.level = level;
  return s;
}

inline Pipeline make(std::vector<StageConfig> stages) {
  StatusOr<Pipeline> p = Pipeline::make(std::move(stages));
  if (!p.is_ok()) throw std::logic_error("test pipeline rejected: " + p.status().to_string());
  return std::move(p).value();
}

// A stage's default configuration, used for the "every registered stage" pipelines.
inline StageConfig default_stage(StageId id) {
  switch (id) {
    case StageId::kTopK: return topk(0.1);
    case StageId::kRandK: return randk(0.1);
    default: return st(id);
  }
}

// x of length n. Kinds: random (N(0,1)), zero, constant, huge (N(0,1) * 1e30), tiny
// (N(0,1) * 1e-40, fp32 subnormals), special (N(0,1) with NaN, +Inf, -Inf sprinkled).
enum class Input { kRandom, kZero, kConstant, kHuge, kTiny, kSpecial };
inline const char* input_name(Input k) {
  switch (k) {
    case Input::kRandom: return "random";
    case Input::kZero: return "zero";
    case Input::kConstant: return "constant";
    case Input::kHuge: return "huge";
    case Input::kTiny: return "tiny";
    case Input::kSpecial: return "special";
  }
  return "?";
}
constexpr Input kAllInputs[] = {Input::kRandom, Input::kZero, Input::kConstant,
                                Input::kHuge, Input::kTiny, Input::kSpecial};

inline std::vector<float> make_input(Input kind, int64_t n, uint64_t seed = 1) {
  std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(kind));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    switch (kind) {
      case Input::kRandom: v = normal(rng); break;
      case Input::kZero: v = 0.0f; break;
      case Input::kConstant: v = 3.25f; break;
      case Input::kHuge: v = normal(rng) * 1e30f; break;
      case Input::kTiny: v = normal(rng) * 1e-40f; break;
      case Input::kSpecial: {
        const uint64_t r = rng() % 23;
        v = r == 0 ? std::numeric_limits<float>::quiet_NaN()
            : r == 1 ? std::numeric_limits<float>::infinity()
            : r == 2 ? -std::numeric_limits<float>::infinity()
                     : normal(rng);
        break;
      }
    }
  }
  return x;
}

inline at::Tensor tensor_of(const std::vector<float>& x) {
  return at::from_blob(const_cast<float*>(x.data()), {static_cast<int64_t>(x.size())}, at::kFloat).clone();
}

inline std::vector<float> vec_of(const at::Tensor& t) {
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

inline Bytes encode(const Pipeline& p, const std::vector<float>& x, uint64_t seed = 0) {
  Bytes out;
  p.encode(tensor_of(x), out, seed);
  return out;
}

// Decodes into n elements; the Status goes to *status (an ok decode when status is null).
inline std::vector<float> decode(const Pipeline& p, const Bytes& b, int64_t n, Status* status = nullptr) {
  at::Tensor out = at::full({n}, -7.0f, at::kFloat);
  Status s = p.decode(b.data(), b.size(), out);
  if (status) *status = s;
  else EXPECT_TRUE(s.is_ok()) << p.describe() << ": " << s.to_string();
  return vec_of(out);
}

inline bool same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace atl::compression::test
