// Float formats: fp16 / bf16 casts, fp8 E4M3 with a block scale, fp4 E3M0 with a block
// exponent (layouts and rules in quantize.h).
//
// All conversions are integer bit manipulation or exactly-rounded float adds, written as
// flat branch-free loops so that g++ -O3 vectorizes them without libm calls. The fp16
// conversions use the exponent-alignment trick of Maratyszcza's FP16 library (also used by
// c10::Half), which gives IEEE round-to-nearest-even including subnormals and overflow.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "compression/quantize_internal.h"

namespace atl::compression::quant::detail {

namespace {

inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ---- fp16 ---------------------------------------------------------------------------------

inline uint16_t half_from_float(float f) {
  const uint32_t w = bits_of(f);
  const uint32_t sign = w & 0x80000000u;
  const uint32_t shl1 = w + w;  // exponent and mantissa, sign shifted out
  // |f| * 2^112 * 2^-110: overflows to Inf exactly when |f| rounds past the fp16 max, and
  // leaves |f| * 4 otherwise; adding 2^(e+...) then rounds the mantissa at the fp16 ulp.
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t bias = shl1 & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;  // subnormal halves share one ulp
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = bits_of(base);
  const uint32_t nonsign = ((b >> 13) & 0x7c00u) + (b & 0x0fffu);
  return static_cast<uint16_t>((sign >> 16) | blend(shl1 > 0xff000000u, 0x7e00u, nonsign));
}

inline float float_from_half(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normal = float_of((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  const float subnormal = float_of((two_w >> 17) | (126u << 23)) - 0.5f;
  return float_of(sign | blend(two_w < (1u << 27), bits_of(subnormal), bits_of(normal)));
}

// ---- bf16 ---------------------------------------------------------------------------------

inline uint16_t bf16_from_float(float f) {
  const uint32_t w = bits_of(f);
  const uint32_t rounded = (w + 0x7fffu + ((w >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (w >> 16) | 0x40u;
  return static_cast<uint16_t>((w & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// ---- fp8 E4M3 -----------------------------------------------------------------------------

constexpr float kE4m3Max = 448.0f;

// min(|y|, 448) as bits. An integer min: a float clamp lets g++ thread the constant arms
// through the conversion, which leaves branches in the loop and stops vectorization.
inline uint32_t e4m3_clamped_abs_bits(float y) {
  constexpr int32_t kMaxBits = 0x43e00000;  // 448.0f
  const int32_t a = static_cast<int32_t>(bits_of(y) & 0x7fffffffu);
  return static_cast<uint32_t>(a < kMaxBits ? a : kMaxBits);
}

// y finite (|y| above 448 saturates). Round to nearest even.
inline uint8_t e4m3_nearest(float y) {
  const uint32_t w = e4m3_clamped_abs_bits(y);
  const uint32_t sign = (bits_of(y) >> 24) & 0x80u;
  // Below 2^-6 (subnormal): adding 2^14 rounds to the 2^-9 grid; the offset is the code.
  const uint32_t sub = bits_of(float_of(w) + 0x1.0p14f) - (141u << 23);
  // Normal: rebias the exponent (127 -> 7) and round away the low 20 mantissa bits.
  const uint32_t nrm = (w - (120u << 23) + 0x7ffffu + ((w >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | blend(w < (121u << 23), sub, nrm));
}

// Stochastic: up with probability (|y| - lower) / (upper - lower); saturates at 448.
inline uint8_t e4m3_stochastic(float y, uint32_t r) {
  const uint32_t w = e4m3_clamped_abs_bits(y);
  const uint32_t sign = (bits_of(y) >> 24) & 0x80u;
  // Subnormal codes 0..8 are |y| / 2^-9 (code 8 is 2^-6, the least normal). Computed on
  // min(w, 2^-6) so the int conversion stays in range on the lanes that take `nrm`.
  const float q = float_of(w < (121u << 23) ? w : (121u << 23)) * 512.0f;  // in [0, 8]
  const int lo = static_cast<int>(q);  // q >= 0: truncation is floor
  const int up = Noise::unit(r) < q - static_cast<float>(lo) ? 1 : 0;
  const uint32_t sub = static_cast<uint32_t>(lo + up);
  // Normal: add 20 random bits below the kept mantissa, then truncate.
  const uint32_t nrm = (w - (120u << 23) + (r & 0xfffffu)) >> 20;
  return static_cast<uint8_t>(sign | blend(w < (121u << 23), sub, nrm));
}

// The value of an E4M3 code (NaN codes are rejected by the caller, not decoded).
inline float e4m3_value(uint32_t c) {
  const uint32_t e = (c >> 3) & 15u, m = c & 7u;
  const uint32_t normal = ((e + 120u) << 23) | (m << 20);                     // 2^(e-7) * 1.m
  const float subnormal = static_cast<float>(static_cast<int>(m)) * 0x1.0p-9f;  // m * 2^-9
  return float_of(((c & 0x80u) << 24) | blend(e == 0, bits_of(subnormal), normal));
}

// ---- fp4 E3M0 -----------------------------------------------------------------------------

// Code of one working value w (= x, or x * 2^64 in a tiny block) against block exponent
// `ew` (in the working domain). See quantize.h for the rounding rule.
inline uint8_t e3m0_nearest(float x, int ew) {
  const uint32_t w = bits_of(x);
  const int ex = static_cast<int>((w >> 23) & 0xffu);
  const int d = ex - 127 - (ew - 7);           // |x| in [2^(ew-7+d), 2^(ew-6+d))
  const int t = d + static_cast<int>((w >> 22) & 1u);  // + 1 iff |x| >= 1.5 * 2^j
  int f = t < 1 ? 1 : (t > 7 ? 7 : t);
  f = d < 0 ? 0 : f;                           // below 2^(E-7): zero
  const uint32_t sign = (w >> 28) & 0x8u;
  return static_cast<uint8_t>(ex == 255 ? 0u : (sign | static_cast<uint32_t>(f)));
}

// `below` = 2^(6 - ew): |x| * below is the probability of rounding |x| < 2^(E-6) up.
inline uint8_t e3m0_stochastic(float x, int ew, float below, uint32_t r) {
  const uint32_t w = bits_of(x);
  const int ex = static_cast<int>((w >> 23) & 0xffu);
  const int d = ex - 127 - (ew - 7);
  const int up = (w & 0x7fffffu) > (r >> 9) ? 1 : 0;  // P = mantissa / 2^23
  const int hi = d + up > 7 ? 7 : d + up;
  // u < |x| * below, compared as bits (same order for non-negative floats): an integer
  // compare keeps g++ from moving the float multiply into a branch.
  const bool lo = bits_of(Noise::unit(r)) < bits_of(std::fabs(x) * below);
  const uint32_t f = blend(d >= 1, static_cast<uint32_t>(hi), lo);
  const uint32_t sign = (w >> 28) & 0x8u;
  return static_cast<uint8_t>(blend(ex == 255, 0u, sign | f));
}

}  // namespace

// ---- fp16 / bf16 ----------------------------------------------------------------------------

void encode_fp16(const float* in, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) store_u16(out + 2 * i, half_from_float(in[i]));
}
void decode_fp16(const uint8_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_from_half(load_u16(in + 2 * i));
}
void encode_bf16(const float* in, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) store_u16(out + 2 * i, bf16_from_float(in[i]));
}
void decode_bf16(const uint8_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = float_of(static_cast<uint32_t>(load_u16(in + 2 * i)) << 16);
  }
}

// ---- fp8 ------------------------------------------------------------------------------------

void encode_fp8(const float* in, int64_t n, int64_t block, const Noise* noise, uint8_t* out) {
  float scaled[Noise::kChunk];
  uint32_t r[Noise::kChunk];
  for (int64_t start = 0; start < n; start += block) {
    const int64_t len = std::min(block, n - start);
    const float* x = in + start;
    const float scale = block_scale(block_absmax(x, len), kE4m3Max);
    store_f32(out, scale);
    out += 4;
    if (scale == 0.0f) {
      std::memset(out, 0, static_cast<size_t>(len));
      out += len;
      continue;
    }
    const bool tiny = scale < FLT_MIN;  // no finite reciprocal: work on x * 2^64
    const float inv = tiny ? 1.0f / (scale * 0x1.0p64f) : 1.0f / scale;
    for (int64_t c0 = 0; c0 < len; c0 += Noise::kChunk) {
      const int m = static_cast<int>(std::min<int64_t>(Noise::kChunk, len - c0));
      const float* src = x + c0;
      uint8_t* dst = out + c0;
      if (tiny) {
        for (int j = 0; j < m; ++j) scaled[j] = src[j] * 0x1.0p64f;
        src = scaled;
      }
      // y = x / scale (clamped to the E4M3 range by the conversion); non-finite x -> 0.
      if (noise) {
        noise->fill(start + c0, m, r);
        for (int j = 0; j < m; ++j) {
          const float y = zero_unless_finite(src[j] * inv, src[j]);
          dst[j] = e4m3_stochastic(y, r[j]);
        }
      } else {
        for (int j = 0; j < m; ++j) {
          const float y = zero_unless_finite(src[j] * inv, src[j]);
          dst[j] = e4m3_nearest(y);
        }
      }
    }
    out += len;
  }
}

Status decode_fp8(const uint8_t* in, int64_t n, int64_t block, float* out) {
  int64_t b = 0;
  for (int64_t start = 0; start < n; start += block, ++b) {
    const int64_t len = std::min(block, n - start);
    const float scale = load_f32(in);
    if (bits_of(scale) >= 0x7f800000u) {
      return corrupt("quantize: fp8 block " + std::to_string(b) + " has an invalid scale");
    }
    in += 4;
    float* y = out + start;
    int bad = 0;
    for (int64_t j = 0; j < len; ++j) {
      bad |= (in[j] & 0x7f) == 0x7f;  // NaN: the encoder never writes it
      y[j] = e4m3_value(in[j]) * scale;
    }
    if (bad) return corrupt("quantize: fp8 block " + std::to_string(b) + " holds a NaN code");
    in += len;
  }
  return Status::ok();
}

// ---- fp4 ------------------------------------------------------------------------------------

void encode_fp4(const float* in, int64_t n, int64_t block, const Noise* noise, uint8_t* out) {
  float scaled[Noise::kChunk];
  uint32_t r[Noise::kChunk];
  uint8_t codes[Noise::kChunk];
  for (int64_t start = 0; start < n; start += block) {
    const int64_t len = std::min(block, n - start);
    const float* x = in + start;
    const float a = block_absmax(x, len);
    // Below 2^-100 work on x * 2^64 (exact), so every value and threshold is a normal float.
    const bool tiny = a < 0x1.0p-100f;
    const int shift = tiny ? 64 : 0;
    int e = -128;
    if (a > 0.0f) {
      const uint32_t ab = bits_of(tiny ? a * 0x1.0p64f : a);
      e = static_cast<int>(ab >> 23) - 127 + ((ab & 0x7fffffu) != 0) - shift;  // ceil(log2 a)
      e = std::clamp(e, -128, 127);
    }
    const int ew = e + shift;
    const float below = pow2(6 - ew);
    out[0] = static_cast<uint8_t>(static_cast<int8_t>(e));
    out += 1;
    for (int64_t c0 = 0; c0 < len; c0 += Noise::kChunk) {
      const int m = static_cast<int>(std::min<int64_t>(Noise::kChunk, len - c0));
      const float* src = x + c0;
      if (tiny) {
        for (int j = 0; j < m; ++j) scaled[j] = src[j] * 0x1.0p64f;
        src = scaled;
      }
      if (noise) {
        noise->fill(start + c0, m, r);
        for (int j = 0; j < m; ++j) codes[j] = e3m0_stochastic(src[j], ew, below, r[j]);
      } else {
        for (int j = 0; j < m; ++j) codes[j] = e3m0_nearest(src[j], ew);
      }
      pack_nibbles(codes, m, out + c0 / 2);  // Noise::kChunk is even: chunks start on a byte
    }
    out += (len + 1) / 2;
  }
}

Status decode_fp4(const uint8_t* in, int64_t n, int64_t block, float* out) {
  int64_t b = 0;
  for (int64_t start = 0; start < n; start += block, ++b) {
    const int64_t len = std::min(block, n - start);
    const int e = static_cast<int8_t>(in[0]);
    in += 1;
    float* y = out + start;
    const int64_t pairs = len / 2;
    if ((len & 1) && (in[pairs] & 0xf0) != 0) {
      return corrupt("quantize: fp4 block " + std::to_string(b) + " has a non-zero pad nibble");
    }
    if (e >= -120) {
      // Every magnitude 2^(e-6) .. 2^e is a normal float: build its bits directly.
      const uint32_t base = static_cast<uint32_t>(e - 7 + 127);
      auto value = [base](uint32_t c) {
        const uint32_t f = c & 7u;
        return float_of(((c & 8u) << 28) | (f ? (base + f) << 23 : 0u));
      };
      for (int64_t p = 0; p < pairs; ++p) {
        y[2 * p] = value(in[p] & 0x0fu);
        y[2 * p + 1] = value(in[p] >> 4);
      }
      if (len & 1) y[len - 1] = value(in[pairs] & 0x0fu);
    } else {
      float lut[16];
      for (int c = 0; c < 16; ++c) {
        const float mag = (c & 7) ? pow2(e - 7 + (c & 7)) : 0.0f;
        lut[c] = (c & 8) ? -mag : mag;
      }
      for (int64_t p = 0; p < pairs; ++p) {
        y[2 * p] = lut[in[p] & 0x0f];
        y[2 * p + 1] = lut[in[p] >> 4];
      }
      if (len & 1) y[len - 1] = lut[in[pairs] & 0x0f];
    }
    in += (len + 1) / 2;
  }
  return Status::ok();
}

}  // namespace atl::compression::quant::detail
