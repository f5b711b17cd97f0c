#include "src/data/rng.h"

#include <cmath>
#include <numbers>
#include <numeric>
#include <stdexcept>

#include "src/base/hash.h"

namespace atl::data {

uint64_t derive_seed(uint64_t seed, SeedStream stream, uint64_t index) {
  // Chained mixes: changing any of the three inputs changes every output bit pattern.
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(stream)) ^ index);
}

uint64_t Rng::next_u64() { return splitmix64_next(state_); }

uint64_t Rng::uniform_int(uint64_t n) {
  if (n == 0) throw std::invalid_argument("Rng::uniform_int: n must be positive");
  // Lemire (2019): the high word of x * n is uniform once the biased low words are rejected.
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform_open() {
  return (static_cast<double>(next_u64() >> 11) + 0.5) * 0x1.0p-53;
}

double Rng::normal() {
  const double u1 = uniform_open();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double Rng::log_gamma(double alpha) {
  if (!(alpha > 0.0)) throw std::invalid_argument("Rng::log_gamma: alpha must be positive");
  if (alpha < 1.0) {
    return log_gamma(alpha + 1.0) + std::log(uniform_open()) / alpha;
  }
  const double d = alpha - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform_open();
    if (u < 1.0 - 0.0331 * x * x * x * x) return std::log(d * v);
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return std::log(d * v);
  }
}

void shuffle(std::vector<int64_t>& values, Rng& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    const size_t j = rng.uniform_int(i);
    std::swap(values[i - 1], values[j]);
  }
}

std::vector<int64_t> random_permutation(int64_t n, Rng& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  shuffle(order, rng);
  return order;
}

}  // namespace atl::data
