// final_params.bin (src/core/params_file.h): the documented bytes, field by field, and the
// refusals of a damaged file.
#include "src/core/params_file.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "src/base/hash.h"

namespace atl::core {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ParamsFile, HoldsTheDocumentedBytesAndRefusesDamage) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("atoll_params_" + std::to_string(::getpid()) + ".bin")).string();
  const at::Tensor p = at::tensor({1.5f, -2.0f, 0.25f});
  write_params(path, p);
  const std::string bytes = slurp(path);
  // "ATLP", u32 1, u64 count, the floats, u64 xxhash64 of the floats (little-endian)
  std::string want("ATLP", 4);
  auto put = [&](const void* v, size_t n) { want.append(static_cast<const char*>(v), n); };
  const uint32_t version = 1;
  const uint64_t count = 3;
  const float values[3] = {1.5f, -2.0f, 0.25f};
  put(&version, 4);
  put(&count, 8);
  put(values, 12);
  const uint64_t sum = xxh64(values, 12);
  put(&sum, 8);
  EXPECT_EQ(bytes, want);
  auto back = read_params(path);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_TRUE(at::equal(*back, p));

  auto refused = [&](const std::string& damaged, const std::string& why) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    auto r = read_params(path);
    ASSERT_FALSE(r.is_ok()) << why;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << why;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused(want.substr(0, 3), "not a parameter file");
  refused("ATLX" + want.substr(4), "not a parameter file");
  refused(want.substr(0, 20), "size does not match");
  refused(want + "x", "size does not match");
  std::string v2 = want;
  v2[4] = 2;
  refused(v2, "unknown version 2");
  std::string flipped = want;
  flipped[17] ^= 1;
  refused(flipped, "checksum mismatch");
  std::string huge = want;
  huge[15] = 0x7f;  // count ~ 2^63
  refused(huge, "size does not match");
  std::filesystem::remove(path);
  EXPECT_EQ(read_params(path).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace atl::core
