// Seeded random numbers for data handling (hold-out, partitions, sampling, synthetic data).
//
// Everything here is written out by hand instead of using <random> distributions or
// std::shuffle, whose algorithms the C++ standard leaves to the library: the same seed gives
// the same split, shards and batch order with any compiler and standard library.
//
// Rng is a value type owned by one thread; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace atl::data {

// Stream tags for derive_seed(); never renumber (results would change for a given seed).
enum class SeedStream : uint64_t {
  kHoldOut = 1,          // classification validation hold-out
  kPartition = 2,        // partition()
  kSynthetic = 3,        // synthetic data set
  kValidationOrder = 4,  // validation_batches()
  kSamplerEpoch = 5,     // Sampler: one order per epoch
  kRouterSplit = 6,      // a re-routing's router split (RunData::router_rows)
};

// Independent seed for (seed, stream, index), e.g. the sampler's order of epoch 7.
uint64_t derive_seed(uint64_t seed, SeedStream stream, uint64_t index = 0);

// The splitmix64 generator (src/base/hash.h): 64-bit state, passes BigCrush, plenty for
// shuffles and sampling.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next_u64();
  // Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject). n > 0.
  uint64_t uniform_int(uint64_t n);
  // Uniform double in [0, 1) with 53 random bits.
  double uniform();
  // Uniform double in (0, 1): never 0, so log() is safe.
  double uniform_open();
  // Standard normal (Box-Muller, no cached second value, so the stream stays simple).
  double normal();
  // log of a Gamma(alpha, 1) sample, alpha > 0 (Marsaglia-Tsang 2000; for alpha < 1 the
  // boost Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha), kept in log space so tiny alphas
  // do not underflow to 0).
  double log_gamma(double alpha);

 private:
  uint64_t state_;
};

// Fisher-Yates shuffle driven by `rng`.
void shuffle(std::vector<int64_t>& values, Rng& rng);

// 0, 1, ..., n - 1 in a seeded random order.
std::vector<int64_t> random_permutation(int64_t n, Rng& rng);

}  // namespace atl::data
