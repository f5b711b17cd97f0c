#include "src/base/hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack: no allocation per checksum
#include <xxhash.h>
// XXH3 through libxxhash's runtime dispatch (AVX2 / AVX-512 where the CPU has them): the same
// hash values, 3-4x faster than the baseline SSE2 build on every data-plane payload.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

namespace atl {

uint64_t xxh64(const void* data, size_t n, uint64_t seed) { return XXH64(data, n, seed); }

uint64_t xxh64(const void* a, size_t na, const void* b, size_t nb) {
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  XXH64_update(&state, a, na);
  if (nb) XXH64_update(&state, b, nb);
  return XXH64_digest(&state);
}

uint64_t xxh3_64(const void* data, size_t n) {
  static const uint8_t kNone = 0;
  return XXH3_64bits(n ? data : &kNone, n);
}

uint64_t xxh3_64(const void* data, size_t n, uint64_t seed) {
  return XXH3_64bits_withSeed(data, n, seed);
}

uint64_t copy_and_xxh3_64(uint8_t* dst, const uint8_t* src, size_t n) {
  constexpr size_t kBlock = 64 << 10;  // fits L2 with room to spare
  if (n <= kBlock) {
    if (n) std::memcpy(dst, src, n);
    return xxh3_64(dst, n);
  }
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(), XXH3_freeState);
  if (!state) throw std::bad_alloc();
  (void)XXH3_64bits_reset(state.get());
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t len = std::min(kBlock, n - at);
    std::memcpy(dst + at, src + at, len);
    (void)XXH3_64bits_update(state.get(), dst + at, len);
  }
  return XXH3_64bits_digest(state.get());
}

}  // namespace atl
