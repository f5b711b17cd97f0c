#include "transport/zmq/allreduce_op.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>

#include "src/base/hash.h"
#include "src/base/log.h"

namespace atl::transport::dataplane {

namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string ids_text(const std::vector<int>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? ", " : "") << ids[i];
  return os.str();
}

// Peers agree on the pipeline iff they encode an empty buffer to the same bytes (stage ids
// and parameters are in the frame header).
uint64_t codec_fingerprint(const compression::Pipeline& codec) {
  Bytes frame;
  codec.encode(at::empty({0}, at::kFloat), frame, 0);
  return xxh3_64(frame.data(), frame.size());
}

}  // namespace

AllreduceOp::AllreduceOp(uint64_t seq, at::Tensor buffer, at::Tensor input, const compression::Pipeline& codec,
                         double weight, at::Tensor transmitted, int64_t chunk_bytes,
                         std::shared_ptr<Completion> completion)
    : Op(seq, std::move(completion)), buffer_(std::move(buffer)), transmitted_(std::move(transmitted)),
      input_(std::move(input)), backup_(std::in_place, buffer_, input_), codec_(codec), weight_(weight),
      chunk_bytes_(chunk_bytes) {
  hello_.numel = static_cast<uint64_t>(buffer_.numel());
  hello_.weight = weight;
  hello_.codec = codec_fingerprint(codec_);
  hello_.piece_elems = static_cast<uint64_t>(piece_elements(codec_, chunk_bytes_));
}

void AllreduceOp::start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) {
  attempt(ctx, epoch, members);
}

void AllreduceOp::on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) {
  if (done() || epoch <= epoch_) return;
  if (exchange_ || !answers_.empty()) {
    ATOLL_INFO("zmq data plane: island " << ctx.self() << " restarts collective #" << seq_
                                         << " in epoch " << epoch << " among [" << ids_text(members) << "]");
  }
  attempt(ctx, epoch, members);
}

void AllreduceOp::attempt(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) {
  const int self = ctx.self();
  epoch_ = epoch;
  members_ = members;
  answers_.clear();
  early_.clear();
  exchange_.reset();
  participants_.clear();
  adopt_from_ = -1;
  deadline_ = Clock::time_point::max();
  if (first_members_.empty()) first_members_ = members;
  if (!contains(members, self)) {
    backup_->restore();
    complete(ctx, Status(StatusCode::kMembershipChanged,
                         "island " + std::to_string(self) + " is not a member of epoch " + std::to_string(epoch)),
             {self}, weight_);
    return;
  }
  answers_[self] = hello_;
  Header h;
  h.type = MsgType::kHello;
  h.sender = self;
  h.epoch = epoch_;
  h.seq = seq_;
  auto body = std::make_shared<const Bytes>(encode_hello(hello_));
  for (int p : members) {
    if (p != self) ctx.send(p, Outbound{h, body, 0, body->size(), 0});
  }
  std::vector<Inbound> kept = std::move(future_);
  future_.clear();
  for (Inbound& m : kept) {
    if (m.header.epoch >= epoch_) on_message(ctx, m);  // newer ones go back to future_
  }
  maybe_begin_data(ctx);
}

void AllreduceOp::maybe_begin_data(OpContext& ctx) {
  if (done() || exchange_) return;
  std::vector<int> parts;
  for (int p : members_) {
    auto it = answers_.find(p);
    if (it == answers_.end()) return;  // still waiting for this member
    if (it->second) parts.push_back(p);
  }
  for (int p : parts) {
    const HelloBody& b = *answers_[p];
    if (b.numel != hello_.numel || b.codec != hello_.codec || b.piece_elems != hello_.piece_elems) {
      std::ostringstream os;
      os << "collective #" << seq_ << ": island " << p << " issued " << b.numel
         << " elements (codec " << std::hex << b.codec << ", piece " << std::dec << b.piece_elems
         << "), island " << ctx.self() << " " << hello_.numel << " (codec " << std::hex << hello_.codec
         << ", piece " << std::dec << hello_.piece_elems << "): members issued different collectives "
         << "or disagree on the pipeline or chunk_bytes";
      ATOLL_ERROR("zmq data plane: " << os.str());
      complete(ctx, Status(StatusCode::kInternal, os.str()), {}, 0);
      return;
    }
  }
  if (parts.size() == 1) {  // the mean of one buffer is that buffer, bitwise
    backup_->restore();
    if (transmitted_.defined()) transmitted_.copy_(buffer_);
    complete(ctx, Status::ok(), parts, weight_);
    return;
  }
  begin_data(ctx, parts);
}

void AllreduceOp::begin_data(OpContext& ctx, const std::vector<int>& parts) {
  backup_->restore();
  participants_ = parts;
  double weight_sum = 0;
  bool uniform = true;
  for (int p : parts) {
    weight_sum += answers_[p]->weight;
    uniform = uniform && answers_[p]->weight == answers_[parts[0]]->weight;
  }
  weight_sum_ = weight_sum;
  if (!uniform) {
    backup_->save_all();
    buffer_.mul_(weight_);
  }
  ExchangeSetup s;
  s.seq = seq_;
  s.epoch = epoch_;
  s.members = parts;
  s.pos = static_cast<int>(std::find(parts.begin(), parts.end(), ctx.self()) - parts.begin());
  s.buffer = buffer_;
  s.backup = &*backup_;
  s.transmitted = transmitted_;
  s.codec = &codec_;
  s.divisor = uniform ? static_cast<double>(parts.size()) : weight_sum;
  s.piece_elems = static_cast<int64_t>(hello_.piece_elems);
  s.chunk_bytes = chunk_bytes_;
  const double expected = Exchange::expected_bytes(s);
  exchange_ = codec_.lossless() ? make_ring_exchange(std::move(s)) : make_direct_exchange(std::move(s));
  data_start_ = Clock::now();
  const Tuning& t = ctx.tuning();
  timeout_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
      t.timeout_slack * (t.latency_s + expected / std::max(1.0, ctx.bandwidth())) + 1.0));
  deadline_ = data_start_ + timeout_;
  exchange_->start(ctx);
  std::vector<Inbound> early = std::move(early_);
  early_.clear();
  for (Inbound& m : early) on_message(ctx, m);
}

void AllreduceOp::on_message(OpContext& ctx, Inbound& m) {
  if (done()) return;
  const Header& h = m.header;
  auto drop = [&](const std::string& reason) {
    ctx.drops().drop(reason, std::string(msg_type_name(h.type)) + " for collective #" + std::to_string(seq_) +
                                 " epoch " + std::to_string(h.epoch) + " from island " + std::to_string(h.sender) +
                                 " (this island is in epoch " + std::to_string(epoch_) + ")");
  };
  if (h.type == MsgType::kResultInfo || h.type == MsgType::kResult) return on_adoption(ctx, m);
  if (h.type == MsgType::kBroadcast) return drop("a broadcast message for an all-reduce");
  if (h.epoch < epoch_) return drop("stale epoch");
  if (h.epoch > epoch_) {
    future_.push_back(std::move(m));
    ctx.refresh_membership();
    return;
  }
  if (!contains(members_, h.sender) || h.sender == ctx.self()) return drop("sender is not a member of the attempt");
  if (h.type == MsgType::kHello || h.type == MsgType::kAbsent) {
    if (answers_.count(h.sender)) return drop("duplicate HELLO");
    if (h.type == MsgType::kAbsent) {
      answers_[h.sender] = std::nullopt;
    } else {
      HelloBody b;
      Status st = parse_hello(m.data(), m.size(), &b);
      if (!st.is_ok()) return drop(st.message());
      answers_[h.sender] = b;
    }
    maybe_begin_data(ctx);
    return;
  }
  if (!exchange_) {
    early_.push_back(std::move(m));
    return;
  }
  if (!contains(participants_, h.sender)) return drop("sender is not a participant");
  exchange_->on_message(ctx, m);
  if (!exchange_->failure().is_ok()) {
    ATOLL_ERROR("zmq data plane: collective #" << seq_ << ": " << exchange_->failure().to_string());
    complete(ctx, exchange_->failure(), {}, 0);
    return;
  }
  if (exchange_->done()) {
    const double secs = std::chrono::duration<double>(Clock::now() - data_start_).count();
    ctx.observe_throughput(static_cast<double>(exchange_->bytes_in()), secs);
    std::vector<int> lost;
    for (int p : first_members_) {
      if (!contains(members_, p)) lost.push_back(p);
    }
    Status st = lost.empty() ? Status::ok()
                             : Status(StatusCode::kPeerLost, "islands [" + ids_text(lost) + "] left during collective #" +
                                                                 std::to_string(seq_));
    complete(ctx, std::move(st), participants_, weight_sum_);
  }
}

void AllreduceOp::on_adoption(OpContext& ctx, Inbound& m) {
  const Header& h = m.header;
  if (exchange_) return;  // this attempt's data phase runs: nobody in it has finished
  if (!contains(members_, h.sender) || h.sender == ctx.self()) {
    ctx.drops().drop("result from a non-member", "collective #" + std::to_string(seq_) + " from island " +
                                                     std::to_string(h.sender));
    return;
  }
  if (h.type == MsgType::kResultInfo) {
    if (adopt_from_ >= 0) return;  // another finished member's offer is being taken
    ResultInfoBody info;
    Status st = parse_result_info(m.data(), m.size(), &info);
    if (st.is_ok() && info.numel != hello_.numel) st = corrupt("result of another size");
    if (!st.is_ok()) {
      ctx.drops().drop("invalid RESULT_INFO", st.message());
      return;
    }
    adopt_from_ = h.sender;
    adopt_info_ = std::move(info);
    adopt_pieces_.reset(buffer_.numel());
    return;
  }
  if (h.sender != adopt_from_) return;
  auto range = adopt_pieces_.accept(h);
  Status st = range.is_ok() ? Status::ok() : range.status();
  if (st.is_ok()) {
    at::Tensor dst = buffer_.narrow(0, range->first, range->second - range->first);
    backup_->save(range->first, range->second);
    st = decode_piece(compression::Pipeline(), m, dst);
  }
  if (!st.is_ok()) {
    ctx.drops().drop("invalid RESULT piece", st.message());
    adopt_from_ = -1;  // a restart (new epoch) asks again
    return;
  }
  if (adopt_pieces_.complete()) {
    ATOLL_INFO("zmq data plane: island " << ctx.self() << " takes collective #" << seq_
                                         << "'s result from island " << adopt_from_);
    Status result = adopt_info_.status == StatusCode::kOk
                        ? Status::ok()
                        : Status(adopt_info_.status, "collective #" + std::to_string(seq_) +
                                                         " lost members (result taken from island " +
                                                         std::to_string(adopt_from_) + ")");
    complete(ctx, std::move(result), adopt_info_.contributors, adopt_info_.weight_sum);
  }
}

void AllreduceOp::on_timer(OpContext& ctx, Clock::time_point now) {
  if (done() || !exchange_ || now < deadline_) return;
  const std::vector<int> waiting = exchange_->waiting_on();
  ATOLL_WARN("zmq data plane: island " << ctx.self() << ", collective #" << seq_ << ": no completion after "
                                       << std::chrono::duration<double>(now - data_start_).count()
                                       << " s; suspecting islands [" << ids_text(waiting) << "]");
  for (int p : waiting) ctx.suspect(p);
  timeout_ *= 2;
  deadline_ = now + timeout_;
}

void AllreduceOp::complete(OpContext& ctx, Status status, std::vector<int> contributors, double weight_sum) {
  deadline_ = Clock::time_point::max();
  backup_.reset();  // the input is no longer needed: input_ is free (and solely ours) again
  const bool keep = status.code() == StatusCode::kOk || status.code() == StatusCode::kPeerLost;
  if (keep && ctx.tuning().retain_results && !contributors.empty()) {
    // Copied before the caller is woken: from then on the buffer is the caller's again. The
    // saved input's memory is no longer needed and takes the result.
    input_.copy_(buffer_);
    retained_ = std::make_unique<Retained>(Retained{epoch_, {status, contributors, weight_sum}, std::move(input_)});
  } else {
    ctx.recycle(std::move(input_));
  }
  input_ = at::Tensor();
  early_.clear();
  future_.clear();
  exchange_.reset();
  finish({std::move(status), std::move(contributors), weight_sum});
}

void serve_result(OpContext& ctx, uint64_t seq, uint64_t epoch, const Retained& r, int peer) {
  Header h;
  h.type = MsgType::kResultInfo;
  h.sender = ctx.self();
  h.epoch = epoch;
  h.seq = seq;
  ResultInfoBody info{r.result.status.code(), r.result.weight_sum, static_cast<uint64_t>(r.values.numel()),
                      r.result.contributors};
  auto body = std::make_shared<const Bytes>(encode_result_info(info));
  ctx.send(peer, Outbound{h, body, 0, body->size(), 0});
  h.type = MsgType::kResult;
  const compression::Pipeline fp32;
  send_pieces(ctx, {peer}, h, r.values, fp32, piece_elements(fp32, ctx.tuning().chunk_bytes), 0);
}

}  // namespace atl::transport::dataplane
