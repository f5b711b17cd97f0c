#include "transport/zmq/zmq_group.h"

#include <ATen/ATen.h>

#include "transport/completion.h"
#include "transport/zmq/allreduce_op.h"
#include "transport/zmq/group_io.h"
#include "transport/zmq/star_client.h"

namespace atl::transport {

ZmqGroup::ZmqGroup(ControlPlane& control, ZmqGroupOptions options)
    : control_(control), options_(std::move(options)), server_(control_),
      io_(std::make_shared<dataplane::GroupIo>(control_, options_)),
      seqs_(std::make_shared<std::map<uint32_t, uint64_t>>(options_.first_seqs)), next_seq_((*seqs_)[0]) {
  next_seq_ = options_.first_seq;
  if (options_.star) {
    StarClientOptions so;
    so.first_seq = options_.first_seq;
    so.bandwidth_mbps = options_.bandwidth_mbps;
    so.timeout_slack = options_.timeout_slack;
    so.latency_s = options_.latency_ms / 1e3;
    star_ = std::make_unique<StarClient>(control_, so);
  }
}

ZmqGroup::ZmqGroup(const ZmqGroup& parent, uint32_t key, std::vector<int> ids)
    : control_(parent.control_), options_(parent.options_), server_(control_), io_(parent.io_), seqs_(parent.seqs_),
      next_seq_((*seqs_)[key]), key_(key), ids_(std::move(ids)) {}

ZmqGroup::~ZmqGroup() = default;

MembershipView ZmqGroup::view() const {
  MembershipView v = io_->view();
  v.members = within(std::move(v.members), ids_);
  return v;
}

std::unique_ptr<Group> ZmqGroup::subgroup(uint32_t key, std::vector<int> ids) {
  check_subgroup(key, ids, control_.self());
  return std::unique_ptr<Group>(new ZmqGroup(*this, key, std::move(ids)));
}

template <typename... Args>
std::unique_ptr<Handle> ZmqGroup::submit(Args&&... args) {
  auto done = std::make_shared<Completion>();
  auto op = std::make_unique<dataplane::AllreduceOp>(next_seq_++, std::forward<Args>(args)..., options_.chunk_bytes, done);
  op->set_group(key_, ids_);
  io_->submit(std::move(op));
  return std::make_unique<CompletionHandle>(std::move(done));
}

std::unique_ptr<Handle> ZmqGroup::allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                                 double weight, at::Tensor transmitted) {
  check_allreduce(buffer, weight, transmitted);
  if (star_) return star_->allreduce_mean(next_seq_++, std::move(buffer), codec, weight, std::move(transmitted));
  // The result is computed into a buffer of the op's own (kept for the hand-over); the
  // caller's buffer stays the input until the op completes.
  at::Tensor result = io_->tensors().take(buffer.numel());
  return submit(std::move(buffer), std::move(result), codec, weight, std::move(transmitted));
}

std::unique_ptr<Handle> ZmqGroup::broadcast(int root, at::Tensor buffer, const compression::Pipeline& codec) {
  check_buffer(buffer);
  return submit(root, std::move(buffer), codec);
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
  for (const ByteCounters& b : {server_.bytes(), star_ ? star_->bytes() : ByteCounters{}}) {
    c.sent += b.sent;
    c.received += b.received;
    c.raw_sent += b.raw_sent;
  }
  return c;
}

std::string ZmqGroup::endpoint() const { return io_->endpoint(); }

uint64_t ZmqGroup::dropped() const { return io_->dropped(); }

std::unique_ptr<Handle> ZmqGroup::allgather(std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out) {
  TORCH_CHECK(out != nullptr, "allgather: no output");
  return submit(std::move(bytes), out);
}

}  // namespace atl::transport
