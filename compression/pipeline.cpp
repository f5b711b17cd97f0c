#include "compression/pipeline.h"

#include <ATen/ATen.h>

#include "compression/codec.h"

namespace atl::compression {

namespace {
void check_buffer(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.device().is_cpu(),
              "compression expects a contiguous float32 CPU buffer");
}
}  // namespace

StatusOr<Pipeline> Pipeline::make(std::vector<StageConfig> stages) {
  StatusOr<Chain> chain = make_chain(stages);
  if (!chain.is_ok()) return chain.status();
  Pipeline p;
  p.chain_ = *chain;
  p.stages_.assign(p.chain_.stages.begin(), p.chain_.stages.begin() + p.chain_.size);
  return p;
}

void Pipeline::encode(const at::Tensor& buffer, std::vector<uint8_t>& out, uint64_t seed) const {
  check_buffer(buffer);
  TORCH_CHECK(buffer.numel() <= kMaxElements, "a frame holds at most 2^31 elements, got ", buffer.numel());
  encode_frame(chain_, buffer.data_ptr<float>(), buffer.numel(), seed, out);
}

Status Pipeline::decode(const uint8_t* bytes, size_t size, at::Tensor& out) const {
  check_buffer(out);
  if (out.numel() > kMaxElements) {
    return corrupt("a frame holds at most 2^31 elements; the output has " + std::to_string(out.numel()));
  }
  return decode_frame(chain_, bytes, size, out.data_ptr<float>(), out.numel());
}

size_t Pipeline::max_encoded_size(int64_t n) const { return max_frame_size(chain_, n); }

bool Pipeline::lossless() const {
  return chain_.empty() || (chain_.size == 1 && chain_.stages[0].id == StageId::kZstd);
}

std::string Pipeline::describe() const { return describe_chain(chain_); }

}  // namespace atl::compression
