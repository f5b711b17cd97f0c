// int8 / int4: blockwise absmax scaling (layout and rules in quantize.h).
//
// Per block: pass 1 finds the finite absmax (an integer max over the |x| bit patterns);
// pass 2 quantizes in chunks of Noise::kChunk values into a small code buffer, which int8
// copies out and int4 packs two to a byte. Each pass is a flat loop with no calls or
// data-dependent branches, so g++ -O3 vectorizes it even at the baseline ISA (SSE2).
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <string>

#include "compression/quantize_internal.h"

namespace atl::compression::quant::detail {

namespace {

// codes[j] = round(x[j] * inv) clamped to [-qmax, qmax]; non-finite x -> 0.
void quantize_nearest(const float* x, int len, float inv, float qmax, uint8_t* codes) {
  for (int j = 0; j < len; ++j) {
    float v = zero_unless_finite(x[j] * inv, x[j]);
    v = v < -qmax ? -qmax : v;
    v = v > qmax ? qmax : v;
    codes[j] = static_cast<uint8_t>(static_cast<int>(round_even(v)));
  }
}

// Unbiased stochastic rounding: floor(v) + 1 with probability frac(v), so E[code] = v.
void quantize_stochastic(const float* x, int len, float inv, float qmax, const uint32_t* r,
                         uint8_t* codes) {
  for (int j = 0; j < len; ++j) {
    float v = zero_unless_finite(x[j] * inv, x[j]);
    v = v < -qmax ? -qmax : v;
    v = v > qmax ? qmax : v;
    int lo = static_cast<int>(v);                  // toward zero; floor below:
    lo -= static_cast<float>(lo) > v ? 1 : 0;
    const float frac = v - static_cast<float>(lo);  // in [0, 1)
    codes[j] = static_cast<uint8_t>(lo + (Noise::unit(r[j]) < frac ? 1 : 0));
  }
}

}  // namespace

void encode_int(int bits, const float* in, int64_t n, int64_t block, const Noise* noise,
                uint8_t* out) {
  const float qmax = bits == 8 ? 127.0f : 7.0f;
  uint8_t codes[Noise::kChunk];
  float scaled[Noise::kChunk];
  uint32_t r[Noise::kChunk];
  for (int64_t start = 0; start < n; start += block) {
    const int64_t len = std::min(block, n - start);
    const float* x = in + start;
    const int64_t code_bytes = bits == 8 ? len : (len + 1) / 2;
    const float scale = block_scale(block_absmax(x, len), qmax);
    store_f32(out, scale);
    out += 4;
    if (scale == 0.0f) {  // all zero / non-finite, or the scale underflowed
      std::memset(out, 0, static_cast<size_t>(code_bytes));
      out += code_bytes;
      continue;
    }
    // A subnormal scale has no finite reciprocal: quantize x * 2^64 against scale * 2^64
    // (both exact) instead.
    const bool tiny = scale < FLT_MIN;
    const float inv = tiny ? 1.0f / (scale * 0x1.0p64f) : 1.0f / scale;
    for (int64_t c0 = 0; c0 < len; c0 += Noise::kChunk) {
      const int m = static_cast<int>(std::min<int64_t>(Noise::kChunk, len - c0));
      const float* src = x + c0;
      if (tiny) {
        for (int j = 0; j < m; ++j) scaled[j] = src[j] * 0x1.0p64f;
        src = scaled;
      }
      uint8_t* dst = bits == 8 ? out + c0 : codes;  // int8 writes its codes in place
      if (noise) {
        noise->fill(start + c0, m, r);
        quantize_stochastic(src, m, inv, qmax, r, dst);
      } else {
        quantize_nearest(src, m, inv, qmax, dst);
      }
      if (bits == 4) pack_nibbles(codes, m, out + c0 / 2);  // Noise::kChunk is even: whole bytes
    }
    out += code_bytes;
  }
}

Status decode_int(int bits, const uint8_t* in, int64_t n, int64_t block, float* out) {
  int64_t b = 0;
  for (int64_t start = 0; start < n; start += block, ++b) {
    const int64_t len = std::min(block, n - start);
    const float scale = load_f32(in);
    if (bits_of(scale) >= 0x7f800000u) {  // sign bit set, Inf or NaN
      return corrupt("quantize: int" + std::to_string(bits) + " block " + std::to_string(b) +
                     " has an invalid scale");
    }
    in += 4;
    float* y = out + start;
    int bad = 0;
    if (bits == 8) {
      const int8_t* c = reinterpret_cast<const int8_t*>(in);
      for (int64_t j = 0; j < len; ++j) {
        bad |= c[j] == -128;
        y[j] = static_cast<float>(c[j]) * scale;
      }
      in += len;
    } else {
      const int64_t pairs = len / 2;
      for (int64_t p = 0; p < pairs; ++p) {
        const uint8_t v = in[p];
        bad |= ((v & 0x0f) == 0x08) | ((v & 0xf0) == 0x80);
        y[2 * p] = static_cast<float>(static_cast<int8_t>(v << 4) >> 4) * scale;
        y[2 * p + 1] = static_cast<float>(static_cast<int8_t>(v) >> 4) * scale;
      }
      if (len & 1) {
        const uint8_t v = in[pairs];
        bad |= ((v & 0x0f) == 0x08) | ((v & 0xf0) != 0);  // padding nibble must be 0
        y[len - 1] = static_cast<float>(static_cast<int8_t>(v << 4) >> 4) * scale;
      }
      in += (len + 1) / 2;
    }
    if (bad) {
      return corrupt("quantize: int" + std::to_string(bits) + " block " + std::to_string(b) +
                     " holds a code the encoder never writes");
    }
  }
  return Status::ok();
}

}  // namespace atl::compression::quant::detail
