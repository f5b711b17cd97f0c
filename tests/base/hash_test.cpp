// src/base/hash.h: golden values (seeds and checksums are part of atoll's determinism and of
// its wire and file formats, so they must never change) and the helpers against libxxhash.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <vector>

#include "src/base/hash.h"

namespace atl {
namespace {

TEST(Hash, Splitmix64GoldenValues) {
  // The reference generator (Steele, Lea, Flood 2014) from state 0.
  uint64_t state = 0;
  EXPECT_EQ(splitmix64_next(state), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64_next(state), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(splitmix64_next(state), 0x06c45d188009454fULL);
  EXPECT_EQ(state, 3 * kSplitmix64Gamma);
  // The stateless form is the generator's output for that state.
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(kSplitmix64Gamma), 0x6e789e6aa1b965f4ULL);
  static_assert(splitmix64(0) == 0xe220a8397b1dcdafULL, "usable in constant expressions");
}

TEST(Hash, XxhGoldenValues) {
  EXPECT_EQ(xxh64("", 0), 0xef46db3751d8e999ULL);
  EXPECT_EQ(xxh64("abc", 3), 0x44bc2cf5ad770999ULL);
  EXPECT_EQ(xxh3_64(nullptr, 0), 0x2d06800538d394c2ULL);
  EXPECT_EQ(xxh3_64("abc", 3), 0x78af5f94892f3950ULL);
}

TEST(Hash, HelpersAgreeWithLibxxhash) {
  std::vector<uint8_t> data(300000);  // several of copy_and_xxh3_64's 64 KiB blocks, and a tail
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{65536}, size_t{65537}, data.size()}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(xxh64(data.data(), n, 42), XXH64(data.data(), n, 42));
    EXPECT_EQ(xxh3_64(data.data(), n), XXH3_64bits(data.data(), n));
    EXPECT_EQ(xxh3_64(data.data(), n, 99), XXH3_64bits_withSeed(data.data(), n, 99));
    // Two pieces hash as their concatenation.
    const size_t half = n / 2;
    EXPECT_EQ(xxh64(data.data(), half, data.data() + half, n - half), XXH64(data.data(), n, 0));
    std::vector<uint8_t> copy(n + 1, 0xAB);
    EXPECT_EQ(copy_and_xxh3_64(copy.data(), data.data(), n), XXH3_64bits(data.data(), n));
    EXPECT_TRUE(std::equal(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n), copy.begin()));
    EXPECT_EQ(copy[n], 0xAB);  // nothing written past n
  }
}

}  // namespace
}  // namespace atl
