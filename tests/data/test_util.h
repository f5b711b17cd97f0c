// Helpers shared by the data tests: a temporary directory, file writers, IDX encoders and
// the exact-cover check for partitions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/config/config.h"

namespace atl::data::testing {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "atoll_data_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// IDX images: magic 0x00000803, dims n, rows, cols (big-endian), then the pixels.
inline std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols,
                                       const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out;
  put_be32(out, 0x00000803);
  put_be32(out, n);
  put_be32(out, rows);
  put_be32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

// IDX labels: magic 0x00000801, dim n, then the labels.
inline std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  put_be32(out, 0x00000801);
  put_be32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

inline config::DataConfig synthetic_config(int examples, int dim, int classes) {
  config::DataConfig c;
  c.kind = "synthetic";
  c.synthetic_examples = examples;
  c.synthetic_dim = dim;
  c.synthetic_classes = classes;
  c.val_fraction = 0.0;
  return c;
}

// Every index in [0, n) exactly once over all shards; no shard empty; each shard sorted.
inline void expect_exact_cover(const std::vector<std::vector<int64_t>>& shards, int64_t n) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (size_t s = 0; s < shards.size(); ++s) {
    EXPECT_FALSE(shards[s].empty()) << "shard " << s << " is empty";
    EXPECT_TRUE(std::is_sorted(shards[s].begin(), shards[s].end())) << "shard " << s;
    for (int64_t i : shards[s]) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      ++seen[static_cast<size_t>(i)];
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "example " << i << " used " << seen[i] << " times";
  }
}

// Expects `fn` to throw atl::UserError whose message contains every one of `parts`.
template <typename Fn>
void expect_user_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no UserError thrown";
  } catch (const UserError& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
    }
  }
}

}  // namespace atl::data::testing
