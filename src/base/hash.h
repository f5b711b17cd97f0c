// Hashing and seed mixing shared by every layer: one splitmix64 and one set of xxHash entry
// points. Every seed and checksum in atoll goes through here, so a formula lives in one place;
// the values are part of atoll's determinism (simulator seeds, stochastic rounding, randk
// positions, client sampling) and of its wire and file formats (checksums): never change them.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace atl {

// splitmix64's increment (the 64-bit golden ratio), also used on its own to spread seeds.
constexpr uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ULL;

// The splitmix64 output function of state x (Steele, Lea, Flood 2014): mixes x + gamma.
// A bijection on 64-bit values, used to derive independent seeds from (seed, id, ...).
constexpr uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + kSplitmix64Gamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One step of the splitmix64 generator: returns splitmix64(state), then state += gamma.
// 64-bit state, passes BigCrush; enough for shuffles and sampling.
constexpr uint64_t splitmix64_next(uint64_t& state) {
  const uint64_t out = splitmix64(state);
  state += kSplitmix64Gamma;
  return out;
}

// xxHash64 (seed as given) of data[0, n): file and frame checksums, config identities.
uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);
// xxHash64 (seed 0) of the concatenation a[0, na) b[0, nb), without copying (no allocation).
uint64_t xxh64(const void* a, size_t na, const void* b, size_t nb);

// XXH3-64 of data[0, n) (data may be null when n == 0), through libxxhash's runtime
// dispatch (AVX2 / AVX-512 where the CPU has them; the same values as the plain build).
uint64_t xxh3_64(const void* data, size_t n);
// XXH3-64 of data[0, n) with `seed`.
uint64_t xxh3_64(const void* data, size_t n, uint64_t seed);
// Copies src[0, n) to dst and returns xxh3_64(dst, n), hashing each block while it is still
// in cache. Throws std::bad_alloc when the hash state cannot be allocated (n > 64 KiB only).
uint64_t copy_and_xxh3_64(uint8_t* dst, const uint8_t* src, size_t n);

}  // namespace atl
