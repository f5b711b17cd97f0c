#include "transport/zmq/zmq_group.h"

#include <ATen/ATen.h>

#include "transport/completion.h"
#include "transport/zmq/allreduce_op.h"
#include "transport/zmq/group_io.h"
#include "transport/zmq/star_client.h"

namespace atl::transport {

ZmqGroup::ZmqGroup(ControlPlane& control, ZmqGroupOptions options)
    : NetGroup(control, options.first_seq, options.first_seqs, options.in_flight), options_(std::move(options)),
      io_(std::make_shared<dataplane::GroupIo>(control_, options_)),
      star_(options_.star ? std::make_unique<StarClient>(control_, options_) : nullptr) {}

ZmqGroup::ZmqGroup(const ZmqGroup& parent, uint32_t key, std::vector<int> ids)
    : NetGroup(parent, key, std::move(ids)), options_(parent.options_), io_(parent.io_) {}

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
  // A receiver receives into a tensor of its own, as an all-reduce computes into one.
  at::Tensor result = root == control_.self() ? at::Tensor() : io_->tensors().take(buffer.numel());
  return submit(root, std::move(buffer), std::move(result), codec);
}

ByteCounters ZmqGroup::bytes() const {
  ByteCounters c = io_->counters();
  c += server_.bytes();
  if (star_) c += star_->bytes();
  return c;
}

std::string ZmqGroup::endpoint() const { return io_->endpoint(); }

uint64_t ZmqGroup::dropped() const { return io_->dropped(); }

std::unique_ptr<Handle> ZmqGroup::allgather(std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out) {
  TORCH_CHECK(out != nullptr, "allgather: no output");
  return submit(std::move(bytes), out);
}

}  // namespace atl::transport
