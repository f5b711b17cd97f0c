#include "compression/pipeline.h"

#include <ATen/ATen.h>

#include <cstring>

namespace atl::compression {

static_assert(sizeof(float) == 4, "atoll's wire format is IEEE-754 binary32");

namespace {
void check_buffer(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.device().is_cpu(),
              "compression expects a contiguous float32 CPU buffer");
}
}  // namespace

// Little-endian hosts only for now (x86_64, aarch64); a big-endian host would byte-swap here.
void Pipeline::encode(const at::Tensor& buffer, std::vector<uint8_t>& out) const {
  check_buffer(buffer);
  const size_t bytes = static_cast<size_t>(buffer.numel()) * sizeof(float);
  const size_t at = out.size();
  out.resize(at + bytes);
  if (bytes) std::memcpy(out.data() + at, buffer.data_ptr<float>(), bytes);
}

Status Pipeline::decode(const uint8_t* bytes, size_t size, at::Tensor& out) const {
  check_buffer(out);
  const size_t want = static_cast<size_t>(out.numel()) * sizeof(float);
  if (size != want) {
    return corrupt("fp32 payload has " + std::to_string(size) + " bytes, expected " +
                   std::to_string(want));
  }
  if (want) std::memcpy(out.data_ptr<float>(), bytes, want);
  return Status::ok();
}

}  // namespace atl::compression
