// IDX files (LeCun's MNIST format, also Fashion-MNIST): a 4-byte magic 0x0000TTNN (TT = 0x08
// for unsigned bytes, NN = number of dimensions), NN big-endian uint32 sizes, then the data.
// The sizes are checked against the file length exactly, so a truncated download or a file
// with trailing bytes is refused instead of being read as garbage. setup unzips the .gz files.
#include <ATen/ATen.h>

#include <cstdio>

#include "src/base/status.h"
#include "src/data/readers.h"

namespace atl::data {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dims (N, rows, cols)
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dim (N)

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Validates magic and total size; returns the dimension sizes.
std::vector<int64_t> parse_header(const std::vector<uint8_t>& bytes, uint32_t magic,
                                  const char* what, const std::string& path,
                                  const std::string& key) {
  const std::string where = key + ": '" + path + "'";
  if (bytes.size() < 4) {
    throw UserError(where + " is not an IDX " + what + " file (only " +
                    std::to_string(bytes.size()) + " bytes)");
  }
  const uint32_t found = read_be32(bytes.data());
  if (found != magic) {
    throw UserError(where + " is not an IDX " + what + " file (magic " + hex32(found) +
                    ", expected " + hex32(magic) + ")");
  }
  const size_t ndim = magic & 0xff;
  const size_t header = 4 + 4 * ndim;
  if (bytes.size() < header) {
    throw UserError(where + " is truncated: " + std::to_string(bytes.size()) +
                    " bytes, shorter than its " + std::to_string(header) + "-byte header");
  }
  std::vector<int64_t> dims(ndim);
  uint64_t payload = 1;
  bool too_big = false;  // the header asks for more bytes than the file has
  std::string shape;
  for (size_t d = 0; d < ndim; ++d) {
    dims[d] = read_be32(bytes.data() + 4 + 4 * d);
    if (dims[d] == 0) throw UserError(where + " has a zero-sized dimension " + std::to_string(d));
    shape += (d ? " x " : "") + std::to_string(dims[d]);
    // Multiply only while the product stays below the file size: no overflow.
    if (!too_big && static_cast<uint64_t>(dims[d]) <= bytes.size() / payload) {
      payload *= static_cast<uint64_t>(dims[d]);
    } else {
      too_big = true;
    }
  }
  const uint64_t expected = header + payload;
  if (too_big || bytes.size() != expected) {
    const bool truncated = too_big || bytes.size() < expected;
    throw UserError(where + " has " + std::to_string(bytes.size()) + " bytes but its header (" +
                    shape + ") needs " + (too_big ? "more" : std::to_string(expected)) +
                    (truncated ? " (truncated?)" : " (trailing bytes)"));
  }
  return dims;
}

}  // namespace

at::Tensor read_idx_images(const std::string& path, const std::string& key) {
  const std::vector<uint8_t> bytes = read_file(path, key);
  const std::vector<int64_t> dims = parse_header(bytes, kImagesMagic, "image", path, key);
  const int64_t n = dims[0];
  const int64_t d = dims[1] * dims[2];
  at::Tensor features = at::empty({n, d}, at::kFloat);
  float* out = features.data_ptr<float>();
  const uint8_t* in = bytes.data() + 16;
  for (int64_t i = 0; i < n * d; ++i) out[i] = static_cast<float>(in[i]) / 255.0f;
  return features;
}

std::vector<int64_t> read_idx_labels(const std::string& path, const std::string& key) {
  const std::vector<uint8_t> bytes = read_file(path, key);
  const std::vector<int64_t> dims = parse_header(bytes, kLabelsMagic, "label", path, key);
  return std::vector<int64_t>(bytes.begin() + 8, bytes.begin() + 8 + dims[0]);
}

}  // namespace atl::data
