#include "compression/sparse.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "src/base/hash.h"

namespace atl::compression {

namespace {

// |x| as an integer that orders like |x| (and puts NaN above +Inf).
inline uint32_t magnitude_key(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }

// Finds the bucket b where, scanning from the top, the running count reaches `need`:
// above(b) < need <= above(b) + hist[b]. Returns b and sets *above = above(b).
uint32_t find_bucket(const uint32_t* hist, uint64_t need, uint64_t* above) {
  uint64_t acc = 0;
  for (int b = 65535; b >= 0; --b) {
    if (acc + hist[b] >= need) {
      *above = acc;
      return static_cast<uint32_t>(b);
    }
    acc += hist[b];
  }
  *above = acc;  // unreachable when need <= total
  return 0;
}

// Salts the frame seed so randk's stream differs from a quantizer's keyed by the same seed.
constexpr uint64_t kRandKSalt = 0x72616e646b000001ull;  // "randk\0\0\1"

}  // namespace

void topk_indices(const float* x, int64_t n, int64_t k, uint32_t* idx) {
  if (k <= 0) return;
  if (k >= n) {
    for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<uint32_t>(i);
    return;
  }
  // Pass 1: histogram of the top 16 bits of the key; find the bucket holding the k-th largest.
  std::vector<uint32_t> hist(65536, 0);
  for (int64_t i = 0; i < n; ++i) ++hist[magnitude_key(x[i]) >> 16];
  uint64_t above_hi = 0;
  const uint32_t hi = find_bucket(hist.data(), static_cast<uint64_t>(k), &above_hi);
  // Pass 2: histogram of the low 16 bits inside that bucket; the threshold key T.
  std::fill(hist.begin(), hist.end(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = magnitude_key(x[i]);
    if ((key >> 16) == hi) ++hist[key & 0xffffu];
  }
  uint64_t above_lo = 0;
  const uint32_t lo = find_bucket(hist.data(), static_cast<uint64_t>(k) - above_hi, &above_lo);
  const uint32_t threshold = (hi << 16) | lo;
  // Pass 3: every key above T, then keys equal to T by ascending index until k are taken.
  uint64_t ties = static_cast<uint64_t>(k) - above_hi - above_lo;
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = magnitude_key(x[i]);
    if (key > threshold || (key == threshold && ties > 0)) {
      if (key == threshold) --ties;
      idx[m++] = static_cast<uint32_t>(i);
    }
  }
}

void randk_indices(uint64_t seed, int64_t n, int64_t k, uint32_t* idx) {
  uint64_t state = seed ^ kRandKSalt;
  int64_t m = 0;
  for (int64_t i = 0; i < n && m < k; ++i) {
    const uint64_t remaining = static_cast<uint64_t>(n - i);
    const uint64_t needed = static_cast<uint64_t>(k - m);
    if (needed == remaining) {  // every remaining position must be taken
      for (; i < n; ++i) idx[m++] = static_cast<uint32_t>(i);
      break;
    }
    // Uniform draw in [0, remaining) by multiply-shift (bias <= remaining / 2^64).
    const uint64_t r = splitmix64_next(state);
    const uint64_t u = static_cast<uint64_t>((static_cast<unsigned __int128>(r) * remaining) >> 64);
    if (u < needed) idx[m++] = static_cast<uint32_t>(i);
  }
}

size_t varint_index_bytes(const uint32_t* idx, int64_t k) {
  size_t bytes = 0;
  for (int64_t i = 0; i < k; ++i) {
    uint32_t g = i == 0 ? idx[0] : idx[i] - idx[i - 1] - 1;
    bytes += 1;
    while (g >= 0x80u) {
      g >>= 7;
      ++bytes;
    }
  }
  return bytes;
}

size_t encode_varint_indices(const uint32_t* idx, int64_t k, uint8_t* out) {
  uint8_t* p = out;
  for (int64_t i = 0; i < k; ++i) {
    uint32_t g = i == 0 ? idx[0] : idx[i] - idx[i - 1] - 1;
    while (g >= 0x80u) {
      *p++ = static_cast<uint8_t>(g | 0x80u);
      g >>= 7;
    }
    *p++ = static_cast<uint8_t>(g);
  }
  return static_cast<size_t>(p - out);
}

Status decode_varint_indices(const uint8_t* in, size_t size, int64_t k, int64_t n, uint32_t* idx) {
  size_t pos = 0;
  uint64_t next = 0;  // smallest index the next gap may produce
  for (int64_t i = 0; i < k; ++i) {
    uint64_t g = 0;
    int shift = 0;
    for (size_t len = 1;; ++len) {
      if (pos >= size) return corrupt("topk index " + std::to_string(i) + ": varint runs past the index bytes");
      if (len > 5) return corrupt("topk index " + std::to_string(i) + ": varint longer than 5 bytes");
      const uint8_t b = in[pos++];
      g |= static_cast<uint64_t>(b & 0x7fu) << shift;
      shift += 7;
      if (!(b & 0x80u)) {
        if (b == 0 && len > 1) return corrupt("topk index " + std::to_string(i) + ": non-minimal varint");
        break;
      }
    }
    const uint64_t at = next + g;
    if (at >= static_cast<uint64_t>(n)) {
      return corrupt("topk index " + std::to_string(i) + " = " + std::to_string(at) +
                     " outside [0, " + std::to_string(n) + ")");
    }
    idx[i] = static_cast<uint32_t>(at);
    next = at + 1;
  }
  if (pos != size) {
    return corrupt("topk indices: " + std::to_string(size - pos) + " bytes left over after " +
                   std::to_string(k) + " indices");
  }
  return Status::ok();
}

void scatter_values(const float* values, const uint32_t* idx, int64_t k, int64_t n, float* out) {
  int64_t hi = n;  // out[hi..n) is final
  for (int64_t i = k - 1; i >= 0; --i) {
    const int64_t j = idx[i];
    const float v = values[i];  // read before any write at or below hi can reach it
    std::fill(out + j + 1, out + hi, 0.0f);
    out[j] = v;
    hi = j;
  }
  std::fill(out, out + hi, 0.0f);
}

}  // namespace atl::compression
