#include "compression/dct.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "compression/chain.h"

namespace atl::compression {

namespace {

// C and its transpose, so both directions run as unit-stride axpy loops (which vectorise
// without reassociating float sums, unlike dot products).
struct DctMatrices {
  std::vector<float> c;   // c[f * n + j]
  std::vector<float> ct;  // ct[j * n + f] = c[f * n + j]
};

const DctMatrices& matrices(int64_t n) {
  if (n < 1 || n > kMaxDctChunk) {
    throw std::invalid_argument("dct length " + std::to_string(n) + " outside [1, " +
                                std::to_string(kMaxDctChunk) + "]");
  }
  static std::mutex mu;
  static std::map<int64_t, std::unique_ptr<const DctMatrices>> cache;  // never erased
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[n];
  if (!slot) {
    auto m = std::make_unique<DctMatrices>();
    m->c.resize(static_cast<size_t>(n * n));
    m->ct.resize(static_cast<size_t>(n * n));
    const double scale = std::sqrt(2.0 / static_cast<double>(n));
    for (int64_t f = 0; f < n; ++f) {
      const double cf = f == 0 ? 1.0 / std::numbers::sqrt2 : 1.0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = scale * cf *
                         std::cos(std::numbers::pi * static_cast<double>((2 * j + 1) * f) /
                                  static_cast<double>(2 * n));
        m->c[f * n + j] = static_cast<float>(v);
        m->ct[j * n + f] = static_cast<float>(v);
      }
    }
    slot = std::move(m);
  }
  return *slot;
}

// out[0..len) = M in[0..len) for a row-major len x len matrix given as its transpose rows:
// out = sum_j in[j] * mt[j, :]. `in` and `out` must not alias.
void apply(const float* mt, const float* in, int64_t len, float* out) {
  std::fill(out, out + len, 0.0f);
  for (int64_t j = 0; j < len; ++j) {
    const float v = in[j];
    const float* row = mt + j * len;
    for (int64_t f = 0; f < len; ++f) out[f] += row[f] * v;
  }
}

// Runs `apply` chunk by chunk; the chunk is copied first so in-place calls work.
void chunked(const float* in, int64_t n, int64_t s, float* out, bool forward) {
  if (s < 1 || s > kMaxDctChunk) throw std::invalid_argument("dct chunk out of range");
  float tmp[kMaxDctChunk];
  const DctMatrices* full = n >= s ? &matrices(s) : nullptr;
  for (int64_t b = 0; b < n; b += s) {
    const int64_t len = std::min(s, n - b);
    const DctMatrices& m = len == s ? *full : matrices(len);
    std::copy(in + b, in + b + len, tmp);
    // forward: y = C x = sum_j x[j] C[:, j] = sum_j x[j] ct[j, :]; inverse: x = sum_f y[f] c[f, :].
    apply(forward ? m.ct.data() : m.c.data(), tmp, len, out + b);
  }
}

}  // namespace

int64_t dct_divisor_chunk(int64_t d, int64_t s) {
  if (d < 1 || s < 1) throw std::invalid_argument("dct_divisor_chunk needs d >= 1 and s >= 1");
  for (int64_t c = std::min(d, s); c > 1; --c) {
    if (d % c == 0) return c;
  }
  return 1;
}

const float* dct_matrix(int64_t n) { return matrices(n).c.data(); }

void dct_forward(const float* x, int64_t n, int64_t s, float* y) { chunked(x, n, s, y, true); }

void dct_inverse(const float* y, int64_t n, int64_t s, float* x) { chunked(y, n, s, x, false); }

}  // namespace atl::compression
