#include "transport/server_link.h"

#include <ATen/ATen.h>

#include <cmath>

#include "transport/star.h"

namespace atl::transport {

std::unique_ptr<Handle> ServerLink::push(uint64_t tag, const at::Tensor& buffer, const compression::Pipeline& codec,
                                         double weight, at::Tensor transmitted) {
  TORCH_CHECK(weight > 0 && std::isfinite(weight), "push weight must be finite and > 0");
  TORCH_CHECK(!star::is_star_tag(tag), "push: tags with the top bit set belong to the star all-reduce");
  const int self = control_.self();
  at::Tensor src = buffer.is_contiguous() ? buffer : buffer.contiguous();
  std::vector<uint8_t> frame;
  codec.encode(src, frame, (tag << 16) ^ static_cast<uint64_t>(self));
  if (transmitted.defined()) {
    at::Tensor received = at::empty_like(src);
    Status st = codec.decode(frame.data(), frame.size(), received);
    TORCH_CHECK(st.is_ok(), "push: own encoding failed to decode: ", st.to_string());
    transmitted.copy_(received);
  }
  sent_ += frame.size();
  raw_ += static_cast<uint64_t>(src.numel()) * sizeof(float);
  Status st = control_.push(tag, std::move(frame), weight);
  if (!st.is_ok()) return std::make_unique<DoneHandle>(CollectiveResult{std::move(st), {}, 0});
  return std::make_unique<DoneHandle>(CollectiveResult{Status::ok(), {self}, weight});
}

std::unique_ptr<Handle> ServerLink::pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec) {
  TORCH_CHECK(out.defined() && out.is_contiguous() && out.scalar_type() == at::kFloat && out.device().is_cpu(),
              "pull takes a contiguous float32 CPU buffer");
  TORCH_CHECK(!star::is_star_tag(tag), "pull: tags with the top bit set belong to the star all-reduce");
  StatusOr<std::vector<uint8_t>> frame = control_.pull(tag, std::nullopt);
  if (!frame.is_ok()) return std::make_unique<DoneHandle>(CollectiveResult{frame.status(), {}, 0});
  received_ += frame->size();
  Status st = codec.decode(frame->data(), frame->size(), out);
  if (!st.is_ok()) return std::make_unique<DoneHandle>(CollectiveResult{std::move(st), {}, 0});
  return std::make_unique<DoneHandle>(CollectiveResult{Status::ok(), {control_.self()}, 1.0});
}

ByteCounters ServerLink::bytes() const { return {sent_.load(), received_.load(), raw_.load()}; }

}  // namespace atl::transport
