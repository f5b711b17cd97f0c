// Shared pieces of the quantizer kernels (quantize_int.cpp, quantize_float.cpp); not a
// public header. Everything here is inline and branch-free enough for g++ -O3 to vectorize
// the per-block loops that use it.
#pragma once

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/base/hash.h"
#include "src/base/status.h"

namespace atl::compression::quant::detail {

inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
inline float float_of(uint32_t u) { return std::bit_cast<float>(u); }

inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);  // little-endian hosts only (see pipeline.cpp)
  return f;
}
inline void store_f32(uint8_t* p, float f) { std::memcpy(p, &f, 4); }

// |x| as bits, with NaN and ±Inf mapped to 0: the block scale ignores non-finite values.
// For non-negative floats the integer order is the float order, so the block absmax is an
// int32 max reduction, which vectorizes at the baseline ISA without -ffast-math (a float
// max reduction does not, nor does an unsigned one without SSE4.1).
inline int32_t finite_abs_bits(float x) {
  const int32_t a = static_cast<int32_t>(bits_of(x) & 0x7fffffffu);
  return a < 0x7f800000 ? a : 0;
}

inline float block_absmax(const float* x, int64_t len) {
  int32_t m = 0;
  for (int64_t j = 0; j < len; ++j) {
    const int32_t a = finite_abs_bits(x[j]);
    m = a > m ? a : m;
  }
  return float_of(static_cast<uint32_t>(m));
}

// c ? a : b as a bit blend, for the same reason as below: both arms are always computed,
// so g++ keeps float arithmetic out of branches and the loop vectorizes.
inline uint32_t blend(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

// v, or +0 where x is NaN or ±Inf. A bit mask rather than `finite ? v : 0`: with the
// default -ftrapping-math g++ will not if-convert a select whose arm holds float
// arithmetic, and a branch in the loop stops vectorization. Callers compute v
// unconditionally for the same reason.
inline float zero_unless_finite(float v, float x) {
  const uint32_t finite = (bits_of(x) & 0x7fffffffu) < 0x7f800000u;
  return float_of(bits_of(v) & (0u - finite));
}

// The fp32 scale of a block with finite absmax a, for codes up to qmax: a / qmax, nudged
// down by one ulp when qmax * scale would overflow to Inf on decode (a near FLT_MAX).
inline float block_scale(float a, float qmax) {
  float s = a / qmax;
  if (s * qmax > FLT_MAX) s = std::nextafter(s, 0.0f);
  return s;
}

// Packs 4-bit codes (low nibble of each byte of codes[0..len)) two to a byte, element 2i in
// the low nibble; an odd len leaves a zero high nibble in the last byte.
inline void pack_nibbles(const uint8_t* codes, int len, uint8_t* out) {
  const int pairs = len / 2;
  for (int p = 0; p < pairs; ++p) {
    out[p] = static_cast<uint8_t>((codes[2 * p] & 0x0f) | (codes[2 * p + 1] << 4));
  }
  if (len & 1) out[pairs] = static_cast<uint8_t>(codes[len - 1] & 0x0f);
}

// 2^k as a float for any k: subnormal below -126, 0 below -149, +Inf above 127.
inline float pow2(int k) {
  if (k > 127) return float_of(0x7f800000u);
  if (k >= -126) return float_of(static_cast<uint32_t>(k + 127) << 23);
  if (k >= -149) return float_of(1u << (k + 149));
  return 0.0f;
}

// Round to nearest, ties to even, for |v| <= 2^22 (the 1.5 * 2^23 trick): no libm call.
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// Stochastic rounding noise: a counter-based generator. draw(i) depends only on (seed, i),
// so any piece of a buffer can be encoded on its own. Cheap 32-bit hashing (which
// vectorizes) keyed per 2^32-element segment of the index space.
class Noise {
 public:
  static constexpr int kChunk = 256;  // elements per fill()

  Noise(uint64_t seed, uint64_t index_offset) : seed_(seed), offset_(index_offset) {}

  // r[j] = 32 random bits for local element index `first + j`, j < len <= kChunk.
  void fill(int64_t first, int len, uint32_t* r) const;

  // Uniform in [0, 1) with 24 random bits.
  static float unit(uint32_t r) { return static_cast<float>(r >> 8) * 0x1.0p-24f; }

 private:
  uint64_t seed_;
  uint64_t offset_;
};

// A 32-bit integer finalizer (two multiply-xorshift rounds; a bijection).
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

inline void Noise::fill(int64_t first, int len, uint32_t* r) const {
  uint64_t g = offset_ + static_cast<uint64_t>(first);
  int done = 0;
  while (done < len) {
    // One segment with a constant high word: keys from (seed, g >> 32).
    const uint64_t key = splitmix64(seed_ ^ splitmix64(g >> 32));
    const uint32_t k1 = static_cast<uint32_t>(key), k2 = static_cast<uint32_t>(key >> 32);
    const uint32_t lo = static_cast<uint32_t>(g);
    const uint64_t room = (uint64_t{1} << 32) - lo;  // elements before the high word changes
    const int seg = room < static_cast<uint64_t>(len - done) ? static_cast<int>(room)
                                                             : len - done;
    uint32_t* out = r + done;
    for (int j = 0; j < seg; ++j) out[j] = mix32(mix32((lo + static_cast<uint32_t>(j)) ^ k1) + k2);
    done += seg;
    g += static_cast<uint64_t>(seg);
  }
}

// Per-format kernels. Arguments are validated by quantize.cpp: n >= 0, block >= 1, `out`
// holds encoded_size bytes, `in` holds exactly that many for decode; noise == nullptr means
// round to nearest.
void encode_int(int bits, const float* in, int64_t n, int64_t block, const Noise* noise,
                uint8_t* out);
Status decode_int(int bits, const uint8_t* in, int64_t n, int64_t block, float* out);

void encode_fp16(const float* in, int64_t n, uint8_t* out);
void decode_fp16(const uint8_t* in, int64_t n, float* out);
void encode_bf16(const float* in, int64_t n, uint8_t* out);
void decode_bf16(const uint8_t* in, int64_t n, float* out);

void encode_fp8(const float* in, int64_t n, int64_t block, const Noise* noise, uint8_t* out);
Status decode_fp8(const uint8_t* in, int64_t n, int64_t block, float* out);

void encode_fp4(const float* in, int64_t n, int64_t block, const Noise* noise, uint8_t* out);
Status decode_fp4(const uint8_t* in, int64_t n, int64_t block, float* out);

}  // namespace atl::compression::quant::detail
