#include "transport/zmq/allreduce_op.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "src/base/log.h"
#include "transport/collectives/schedules.h"

namespace atl::transport::dataplane {

namespace {

// Elements per piece such that one piece's frame is at most `chunk_bytes` bytes: the piece
// length of the schedules' lossless transfers.
int64_t piece_elements(const compression::Pipeline& codec, int64_t chunk_bytes) {
  int64_t p = std::max<int64_t>(1, chunk_bytes / 4);
  p = std::min<int64_t>(p, compression::kMaxElements);
  for (;;) {
    const int64_t size = static_cast<int64_t>(codec.max_encoded_size(p));
    if (size <= chunk_bytes || p == 1) return p;
    p = std::max<int64_t>(1, p - std::max<int64_t>(1, (size - chunk_bytes + 3) / 4));
  }
}

int64_t result_piece_elements(int64_t chunk_bytes) { return piece_elements(compression::Pipeline(), chunk_bytes); }

}  // namespace

AllreduceOp::AllreduceOp(uint64_t seq, const compression::Pipeline& codec, int64_t chunk_bytes,
                         std::shared_ptr<Completion> completion)
    : codec_(codec), chunk_bytes_(chunk_bytes), completion_(std::move(completion)) {
  req_.seq = seq;
  req_.result_piece_elems = result_piece_elements(chunk_bytes);
}

AllreduceOp::AllreduceOp(uint64_t seq, at::Tensor buffer, at::Tensor result, const compression::Pipeline& codec,
                         double weight, at::Tensor transmitted, int64_t chunk_bytes,
                         std::shared_ptr<Completion> completion)
    : AllreduceOp(seq, codec, chunk_bytes, std::move(completion)) {
  req_.buffer = std::move(buffer);
  req_.result = std::move(result);
  req_.transmitted = std::move(transmitted);
  req_.codec = &codec_;
  req_.hello = {collectives::kHelloAllreduce, static_cast<uint64_t>(req_.buffer.numel()), weight,
                collectives::codec_fingerprint(codec_), static_cast<uint64_t>(piece_elements(codec_, chunk_bytes))};
}

AllreduceOp::AllreduceOp(uint64_t seq, std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out,
                         int64_t chunk_bytes, std::shared_ptr<Completion> completion)
    : AllreduceOp(seq, compression::Pipeline(), chunk_bytes, std::move(completion)) {
  gather_in_ = std::move(bytes);
  req_.gather_in = &gather_in_;
  req_.gather_out = out;
  req_.hello = {collectives::kHelloAllgather, gather_in_.size(), 1.0, 0, 1};
}

AllreduceOp::AllreduceOp(uint64_t seq, int root, at::Tensor buffer, at::Tensor result,
                         const compression::Pipeline& codec, int64_t chunk_bytes, std::shared_ptr<Completion> completion)
    : AllreduceOp(seq, codec, chunk_bytes, std::move(completion)) {
  req_.buffer = std::move(buffer);
  req_.result = std::move(result);
  req_.codec = &codec_;
  req_.hello = {collectives::kHelloBroadcast, static_cast<uint64_t>(req_.buffer.numel()), 1.0,
                collectives::codec_fingerprint(codec_), static_cast<uint64_t>(piece_elements(codec_, chunk_bytes)),
                root};
}

void AllreduceOp::on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) {
  if (done() || epoch <= epoch_) return;
  ATOLL_INFO("zmq data plane: island " << ctx.self() << " restarts collective #" << seq() << " in epoch " << epoch
                                       << " among [" << ids_text(members) << "]");
  attempt(ctx, epoch, members);
}

void AllreduceOp::attempt(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) {
  const int self = ctx.self();
  epoch_ = epoch;
  deadline_ = Clock::time_point::max();
  program_ = collectives::Program();
  wire_.reset();
  if (req_.first_members.empty()) req_.first_members = members;
  // The last attempt's zero-copy sends may still read its result tensor: this one writes
  // another (the old one lives until they are acknowledged).
  if (req_.result.defined() && req_.result.use_count() > 1) req_.result = at::empty_like(req_.result);
  if (!contains(members, self)) {
    complete(ctx, {Status(StatusCode::kMembershipChanged,
                          "island " + std::to_string(self) + " is not a member of epoch " + std::to_string(epoch)),
                   {self}, req_.hello.weight});
    return;
  }
  wire_ = std::make_unique<ZmqWire>(group_, seq(), epoch, chunk_bytes_, members, req_.result);
  wire_->bind(ctx);
  program_ = collectives::attempt(*wire_, req_, {members, {}, "zmq data plane"}, &result_);
  step(ctx);
  std::vector<Inbound> kept = std::move(future_);
  future_.clear();
  for (Inbound& m : kept) {
    if (m.header.epoch >= epoch_) on_message(ctx, m);  // newer ones go back to future_
  }
}

void AllreduceOp::on_message(OpContext& ctx, Inbound& m) {
  if (done()) return;
  const Header& h = m.header;
  auto drop = [&](const std::string& reason) {
    ctx.drops().drop(reason, std::string(msg_type_name(h.type)) + " for collective #" + std::to_string(seq()) +
                                 " epoch " + std::to_string(h.epoch) + " from island " + std::to_string(h.sender) +
                                 " (this island is in epoch " + std::to_string(epoch_) + ")");
  };
  if ((h.type == MsgType::kBroadcast) != (req_.hello.kind == collectives::kHelloBroadcast) &&
      (h.type == MsgType::kBroadcast || h.type == MsgType::kRing || h.type == MsgType::kDirect ||
       h.type == MsgType::kGather)) {
    return drop("a message of another kind of collective");
  }
  if (h.epoch < epoch_) return drop("stale epoch");
  if (h.epoch > epoch_) {
    future_.push_back(std::move(m));
    ctx.refresh_membership();
    return;
  }
  if (!wire_) return;
  wire_->bind(ctx);
  wire_->deliver(m);
  step(ctx);
}

void AllreduceOp::step(OpContext& ctx) {
  try {
    while (!program_.done() && wire_->can_resume()) program_.resume();
  } catch (const collectives::CorruptFrame& e) {
    ATOLL_ERROR("zmq data plane: collective #" << seq() << ": " << e.what());
    complete(ctx, {Status(StatusCode::kCorrupt, e.what()), {}, 0});
    return;
  }
  const bool data = wire_->in_data_phase();
  if (program_.done()) {
    if (data && deadline_ != Clock::time_point::max()) {
      ctx.observe_throughput(static_cast<double>(wire_->bytes_in()),
                             std::chrono::duration<double>(Clock::now() - data_start_).count());
    }
    complete(ctx, std::move(result_));
  } else if (data && deadline_ == Clock::time_point::max()) {  // the data phase began: its clock starts
    const ZmqGroupOptions& o = ctx.options();
    data_start_ = Clock::now();
    timeout_ = transfer_timeout(o.timeout_slack, o.latency_ms / 1e3, wire_->expected_bytes(),
                                std::max(1.0, ctx.bandwidth()));
    deadline_ = data_start_ + timeout_;
  }
}

void AllreduceOp::on_timer(OpContext& ctx, Clock::time_point now) {
  if (done() || !wire_ || now < deadline_) return;
  const int waiting = wire_->waiting_on();
  ATOLL_WARN("zmq data plane: island " << ctx.self() << ", collective #" << seq() << ": no completion after "
                                       << std::chrono::duration<double>(now - data_start_).count()
                                       << " s; suspecting island " << waiting);
  if (waiting >= 0) ctx.suspect(waiting);
  timeout_ *= 2;
  deadline_ = now + timeout_;
}

void AllreduceOp::complete(OpContext& ctx, CollectiveResult result) {
  deadline_ = Clock::time_point::max();
  const StatusCode code = result.status.code();
  const bool produced =
      (code == StatusCode::kOk || code == StatusCode::kPeerLost) && !result.contributors.empty();
  const bool keep = produced && ctx.options().retain_results;
  // Copied before the caller is woken: from then on the buffer is the caller's again. A
  // collective that produced nothing leaves the caller its input. The pieces the wire kept
  // are final values the result tensor does not hold.
  std::vector<KeptPiece> pieces = wire_ ? wire_->take_kept() : std::vector<KeptPiece>{};
  if (produced && req_.result.defined()) assemble(req_.result, pieces, req_.buffer);
  program_ = collectives::Program();  // their references to the result tensor go
  wire_.reset();
  if (keep && req_.gather_out) {
    retained_ = std::make_unique<Retained>(Retained{{result, collectives::pack_gathered(*req_.gather_out)}, {}});
  } else if (keep && !req_.result.defined()) {  // a broadcast's root
    retained_ = std::make_unique<Retained>(Retained{{result, req_.buffer.clone()}, {}});
  } else if (keep) {
    retained_ = std::make_unique<Retained>(Retained{{result, std::move(req_.result)}, std::move(pieces)});
  } else if (req_.result.defined()) {
    ctx.recycle(std::move(req_.result));
  }
  req_.result = at::Tensor();
  future_.clear();
  finish(std::move(result));
}

void assemble(const at::Tensor& result, std::vector<KeptPiece>& pieces, const at::Tensor& dst) {
  std::sort(pieces.begin(), pieces.end(), [](const KeptPiece& a, const KeptPiece& b) { return a.first < b.first; });
  auto* out = static_cast<uint8_t*>(dst.data_ptr());
  const bool same = dst.data_ptr() == result.data_ptr();
  int64_t at = 0;  // elements below are placed
  auto from_result = [&](int64_t end) {
    if (!same && end > at) dst.narrow(0, at, end - at).copy_(result.narrow(0, at, end - at));
  };
  for (const KeptPiece& p : pieces) {
    const auto n = static_cast<int64_t>(p.message->size() / sizeof(float));
    TORCH_CHECK(p.first >= at && p.first + n <= dst.numel(), "kept pieces overlap or lie outside the result");
    from_result(p.first);
    std::memcpy(out + p.first * sizeof(float), p.message->data(), p.message->size());
    at = p.first + n;
  }
  from_result(dst.numel());
}

void serve_result(OpContext& ctx, uint64_t seq, uint64_t epoch, Retained& r, int peer, uint32_t group) {
  r.settle();
  ZmqWire wire(group, seq, epoch, ctx.options().chunk_bytes, {std::min(peer, ctx.self()), std::max(peer, ctx.self())});
  wire.bind(ctx);
  collectives::hand_over(wire, r.kept, peer, result_piece_elements(ctx.options().chunk_bytes)).run();  // sends only
}

}  // namespace atl::transport::dataplane
