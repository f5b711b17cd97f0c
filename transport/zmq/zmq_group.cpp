#include "transport/zmq/zmq_group.h"

#include <ATen/ATen.h>

#include <cmath>

#include "transport/completion.h"
#include "transport/zmq/allreduce_op.h"
#include "transport/zmq/broadcast_op.h"
#include "transport/zmq/group_io.h"

namespace atl::transport {

namespace {

void check_buffer(const at::Tensor& t) {
  TORCH_CHECK(t.defined() && t.is_contiguous() && t.scalar_type() == at::kFloat && t.device().is_cpu(),
              "collectives take contiguous float32 CPU buffers");
}

}  // namespace

ZmqGroup::ZmqGroup(ControlPlane& control, ZmqGroupOptions options)
    : control_(control), options_(std::move(options)), server_(control_),
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
  auto done = std::make_shared<Completion>();
  at::Tensor input = io_->pool().tensor(buffer.numel());
  input.copy_(buffer);
  io_->submit(std::make_unique<dataplane::AllreduceOp>(next_seq_++, std::move(buffer), std::move(input), codec,
                                                       weight, std::move(transmitted), options_.chunk_bytes, done));
  return std::make_unique<CompletionHandle>(std::move(done));
}

std::unique_ptr<Handle> ZmqGroup::broadcast(int root, at::Tensor buffer, const compression::Pipeline& codec) {
  check_buffer(buffer);
  auto done = std::make_shared<Completion>();
  io_->submit(std::make_unique<dataplane::BroadcastOp>(next_seq_++, root, std::move(buffer), codec,
                                                       options_.chunk_bytes, done));
  return std::make_unique<CompletionHandle>(std::move(done));
}

std::unique_ptr<Handle> ZmqGroup::push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec,
                                       double weight, at::Tensor transmitted) {
  return server_.push(tag, buffer, codec, weight, std::move(transmitted));
}

std::unique_ptr<Handle> ZmqGroup::pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec) {
  return server_.pull(tag, std::move(out), codec);
}

ByteCounters ZmqGroup::bytes() const {
  ByteCounters c = io_->counters();
  const ByteCounters server = server_.bytes();
  c.sent += server.sent;
  c.received += server.received;
  c.raw_sent += server.raw_sent;
  return c;
}

std::string ZmqGroup::endpoint() const { return io_->endpoint(); }

uint64_t ZmqGroup::dropped() const { return io_->dropped(); }

}  // namespace atl::transport
