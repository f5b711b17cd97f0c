#include "transport/zmq/zmq_group.h"

#include <ATen/ATen.h>

#include <cmath>

#include "transport/zmq/allreduce_op.h"
#include "transport/zmq/broadcast_op.h"
#include "transport/zmq/group_io.h"

namespace atl::transport {

namespace {

class ZmqHandle final : public Handle {
 public:
  explicit ZmqHandle(std::shared_ptr<dataplane::Completion> c) : c_(std::move(c)) {}
  bool done() const override { return c_->done(); }
  CollectiveResult wait(Deadline deadline) override { return c_->wait(deadline); }

 private:
  std::shared_ptr<dataplane::Completion> c_;
};


void check_buffer(const at::Tensor& t) {
  TORCH_CHECK(t.defined() && t.is_contiguous() && t.scalar_type() == at::kFloat && t.device().is_cpu(),
              "collectives take contiguous float32 CPU buffers");
}

}  // namespace

ZmqGroup::ZmqGroup(ControlPlane& control, ZmqGroupOptions options)
    : control_(control), options_(std::move(options)),
      io_(std::make_unique<dataplane::GroupIo>(control_, options_)), next_seq_(options_.first_seq) {}

ZmqGroup::~ZmqGroup() = default;

MembershipView ZmqGroup::view() const { return io_->view(); }

std::unique_ptr<Handle> ZmqGroup::allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                                 double weight, at::Tensor transmitted) {
  TORCH_CHECK(weight > 0 && std::isfinite(weight), "allreduce_mean weight must be finite and > 0");
  check_buffer(buffer);
  if (transmitted.defined()) {
    TORCH_CHECK(transmitted.numel() == buffer.numel() && transmitted.is_contiguous() &&
                    transmitted.scalar_type() == at::kFloat,
                "allreduce_mean: `transmitted` must match the buffer");
  }
  auto done = std::make_shared<dataplane::Completion>();
  at::Tensor input = io_->pool().tensor(buffer.numel());
  input.copy_(buffer);
  io_->submit(std::make_unique<dataplane::AllreduceOp>(next_seq_++, std::move(buffer), std::move(input), codec,
                                                       weight, std::move(transmitted), options_.chunk_bytes, done));
  return std::make_unique<ZmqHandle>(std::move(done));
}

std::unique_ptr<Handle> ZmqGroup::broadcast(int root, at::Tensor buffer, const compression::Pipeline& codec) {
  check_buffer(buffer);
  auto done = std::make_shared<dataplane::Completion>();
  io_->submit(std::make_unique<dataplane::BroadcastOp>(next_seq_++, root, std::move(buffer), codec,
                                                       options_.chunk_bytes, done));
  return std::make_unique<ZmqHandle>(std::move(done));
}

std::unique_ptr<Handle> ZmqGroup::push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec,
                                       double weight, at::Tensor transmitted) {
  TORCH_CHECK(weight > 0 && std::isfinite(weight), "push weight must be finite and > 0");
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
  control_sent_ += frame.size();
  control_raw_ += static_cast<uint64_t>(src.numel()) * sizeof(float);
  Status st = control_.push(tag, std::move(frame), weight);
  if (!st.is_ok()) return std::make_unique<DoneHandle>(CollectiveResult{std::move(st), {}, 0});
  return std::make_unique<DoneHandle>(CollectiveResult{Status::ok(), {self}, weight});
}

std::unique_ptr<Handle> ZmqGroup::pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec) {
  check_buffer(out);
  StatusOr<std::vector<uint8_t>> frame = control_.pull(tag, std::nullopt);
  if (!frame.is_ok()) return std::make_unique<DoneHandle>(CollectiveResult{frame.status(), {}, 0});
  control_received_ += frame->size();
  Status st = codec.decode(frame->data(), frame->size(), out);
  if (!st.is_ok()) return std::make_unique<DoneHandle>(CollectiveResult{std::move(st), {}, 0});
  return std::make_unique<DoneHandle>(CollectiveResult{Status::ok(), {control_.self()}, 1.0});
}

ByteCounters ZmqGroup::bytes() const {
  ByteCounters c = io_->counters();
  c.sent += control_sent_.load();
  c.received += control_received_.load();
  c.raw_sent += control_raw_.load();
  return c;
}

std::string ZmqGroup::endpoint() const { return io_->endpoint(); }

uint64_t ZmqGroup::dropped() const { return io_->dropped(); }

}  // namespace atl::transport
