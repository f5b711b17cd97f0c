#include "src/core/params_file.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "src/base/bytes.h"
#include "src/base/hash.h"
#include "src/core/run_dir.h"

namespace atl::core {
namespace {
constexpr char kMagic[4] = {'A', 'T', 'L', 'P'};
constexpr uint32_t kVersion = 1;
}  // namespace

void write_params(const std::string& path, const at::Tensor& params) {
  at::Tensor p = params.detach().to(at::kCPU).to(at::kFloat).contiguous();
  const uint64_t n = static_cast<uint64_t>(p.numel());
  bytes::ByteWriter w;
  w.raw(kMagic, 4);
  w.u32(kVersion);
  w.u64(n);
  w.raw(p.data_ptr<float>(), n * sizeof(float));
  w.u64(xxh64(p.data_ptr<float>(), n * sizeof(float)));
  write_file_atomic(path, std::move(w).bytes());
}

StatusOr<at::Tensor> read_params(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read '" + path + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes::Reader r(bytes, "parameter file");
  const uint8_t* magic = r.take(4, "magic");
  if (!magic || std::memcmp(magic, kMagic, 4) != 0) return corrupt(path + ": not a parameter file");
  const uint32_t version = r.u32("version");
  const uint64_t n = r.u64("count");
  if (r.ok() && version != kVersion) return corrupt(path + ": unknown version " + std::to_string(version));
  if (!r.ok() || n > r.remaining() / sizeof(float) || r.remaining() != n * sizeof(float) + 8) {
    return corrupt(path + ": size does not match the declared count");
  }
  const uint8_t* values = r.take(n * sizeof(float), "values");
  if (xxh64(values, n * sizeof(float)) != r.u64("checksum")) return corrupt(path + ": checksum mismatch");
  at::Tensor t = at::empty({static_cast<int64_t>(n)}, at::kFloat);
  std::memcpy(t.data_ptr<float>(), values, n * sizeof(float));
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
