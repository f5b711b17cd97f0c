#include "src/core/params_file.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "src/base/hash.h"
#include "src/core/run_dir.h"

namespace atl::core {
namespace {
constexpr char kMagic[4] = {'A', 'T', 'L', 'P'};
constexpr uint32_t kVersion = 1;
template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);  // little-endian hosts
}
}  // namespace

void write_params(const std::string& path, const at::Tensor& params) {
  at::Tensor p = params.detach().to(at::kCPU).to(at::kFloat).contiguous();
  const uint64_t n = static_cast<uint64_t>(p.numel());
  std::string out(kMagic, 4);
  put(out, kVersion);
  put(out, n);
  out.append(reinterpret_cast<const char*>(p.data_ptr<float>()), n * sizeof(float));
  put(out, static_cast<uint64_t>(xxh64(p.data_ptr<float>(), n * sizeof(float))));
  write_file_atomic(path, out);
}

StatusOr<at::Tensor> read_params(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read '" + path + "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kMagic, 4) != 0) return corrupt(path + ": not a parameter file");
  uint32_t version = 0;
  uint64_t n = 0, sum = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  std::memcpy(&n, bytes.data() + 8, 8);
  if (version != kVersion) return corrupt(path + ": unknown version " + std::to_string(version));
  if (n > (bytes.size() - 24) / sizeof(float) || bytes.size() != 24 + n * sizeof(float)) {
    return corrupt(path + ": size does not match the declared count");
  }
  std::memcpy(&sum, bytes.data() + 16 + n * sizeof(float), 8);
  if (xxh64(bytes.data() + 16, n * sizeof(float)) != sum) return corrupt(path + ": checksum mismatch");
  at::Tensor t = at::empty({static_cast<int64_t>(n)}, at::kFloat);
  std::memcpy(t.data_ptr<float>(), bytes.data() + 16, n * sizeof(float));
  return t;
}

std::string params_xxh64_hex(const at::Tensor& params) {
  const at::Tensor c = params.detach().to(at::kCPU).contiguous();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx",
                static_cast<unsigned long long>(xxh64(c.data_ptr(), c.nbytes())));
  return text;
}

}  // namespace atl::core
