// Little-endian fields at byte offsets, for the wire bodies and headers (the data plane's
// header, the rendezvous bodies, gloo's message prefix): memcpy on a little-endian host.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace atl::transport::le {

static_assert(std::endian::native == std::endian::little, "the wire formats are written little-endian with memcpy");

template <typename T>
void put(uint8_t* out, size_t at, T v) {
  std::memcpy(out + at, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* in, size_t at) {
  T v;
  std::memcpy(&v, in + at, sizeof(T));
  return v;
}

}  // namespace atl::transport::le
