#include "transport/zmq/allreduce_op.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "src/base/hash.h"
#include "src/base/log.h"
#include "transport/collectives/schedules.h"

namespace atl::transport::dataplane {

namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string ids_text(const std::vector<int>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? ", " : "") << ids[i];
  return os.str();
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
  hello_.codec = collectives::codec_fingerprint(codec_);
  hello_.piece_elems = static_cast<uint64_t>(piece_elements(codec_, chunk_bytes_));
}

AllreduceOp::AllreduceOp(uint64_t seq, std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out,
                         int64_t chunk_bytes, std::shared_ptr<Completion> completion)
    : Op(seq, std::move(completion)), gather_(true), gather_in_(std::move(bytes)), gather_out_(out), weight_(1.0),
      chunk_bytes_(chunk_bytes) {
  hello_.kind = kHelloAllgather;
  hello_.numel = gather_in_.size();
  hello_.piece_elems = 1;
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
    if (backup_) backup_->restore();
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
  h.group = group_;
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
    const bool agree = b.kind == hello_.kind &&
                       (gather_ || (b.numel == hello_.numel && b.codec == hello_.codec &&
                                    b.piece_elems == hello_.piece_elems));
    if (!agree) {
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
    if (gather_) {
      *gather_out_ = {gather_in_};
    } else {
      backup_->restore();
      if (transmitted_.defined()) transmitted_.copy_(buffer_);
    }
    complete(ctx, Status::ok(), parts, weight_);
    return;
  }
  begin_data(ctx, parts);
}

void AllreduceOp::begin_data(OpContext& ctx, const std::vector<int>& parts) {
  participants_ = parts;
  if (gather_) {
    std::vector<uint64_t> sizes;
    for (int p : parts) sizes.push_back(answers_[p]->numel);
    weight_sum_ = static_cast<double>(parts.size());
    const int pos = static_cast<int>(std::find(parts.begin(), parts.end(), ctx.self()) - parts.begin());
    double expected = 0;
    for (int p : parts) expected += static_cast<double>(answers_[p]->numel);
    start_exchange(ctx,
                   make_gather_exchange(group_, seq_, epoch_, parts, pos, &gather_in_, std::move(sizes), gather_out_,
                                        chunk_bytes_),
                   expected);
    return;
  }
  backup_->restore();
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
  s.group = group_;
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
  start_exchange(ctx, make_exchange(std::move(s)), expected);
}

void AllreduceOp::start_exchange(OpContext& ctx, std::unique_ptr<Exchange> exchange, double expected_bytes) {
  exchange_ = std::move(exchange);
  data_start_ = Clock::now();
  const Tuning& t = ctx.tuning();
  timeout_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
      t.timeout_slack * (t.latency_s + expected_bytes / std::max(1.0, ctx.bandwidth())) + 1.0));
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
    if (st.is_ok() && !gather_ && info.numel != hello_.numel) st = corrupt("result of another size");
    if (st.is_ok() && gather_ && info.numel > (uint64_t{1} << 34)) st = corrupt("allgather result too large");
    if (!st.is_ok()) {
      ctx.drops().drop("invalid RESULT_INFO", st.message());
      return;
    }
    adopt_from_ = h.sender;
    adopt_info_ = std::move(info);
    if (gather_) adopt_buffer_ = at::empty({static_cast<int64_t>(adopt_info_.numel)}, at::kFloat);
    adopt_pieces_.reset(gather_ ? adopt_buffer_.numel() : buffer_.numel());
    return;
  }
  if (h.sender != adopt_from_) return;
  auto range = adopt_pieces_.accept(h);
  Status st = range.is_ok() ? Status::ok() : range.status();
  if (st.is_ok()) {
    at::Tensor dst = (gather_ ? adopt_buffer_ : buffer_).narrow(0, range->first, range->second - range->first);
    if (!gather_) backup_->save(range->first, range->second);
    st = decode_piece(compression::Pipeline(), m, dst);
  }
  if (!st.is_ok()) {
    ctx.drops().drop("invalid RESULT piece", st.message());
    adopt_from_ = -1;  // a restart (new epoch) asks again
    return;
  }
  if (adopt_pieces_.complete() && gather_) {
    if (Status unpacked = unpack_gathered(adopt_buffer_, gather_out_); !unpacked.is_ok()) {
      ctx.drops().drop("invalid RESULT pieces", unpacked.message());
      adopt_from_ = -1;
      return;
    }
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
  if (gather_) {
    if (keep && ctx.tuning().retain_results && !contributors.empty()) {
      retained_ = std::make_unique<Retained>(
          Retained{epoch_, {status, contributors, weight_sum}, pack_gathered(*gather_out_)});
    }
  } else if (keep && ctx.tuning().retain_results && !contributors.empty()) {
    // Copied before the caller is woken: from then on the buffer is the caller's again. The
    // saved input's memory is no longer needed and takes the result.
    input_.copy_(buffer_);
    retained_ = std::make_unique<Retained>(Retained{epoch_, {status, contributors, weight_sum}, std::move(input_)});
  } else if (input_.defined()) {
    ctx.recycle(std::move(input_));
  }
  input_ = at::Tensor();
  early_.clear();
  future_.clear();
  exchange_.reset();
  finish({std::move(status), std::move(contributors), weight_sum});
}

at::Tensor pack_gathered(const std::vector<std::vector<uint8_t>>& gathered) {
  size_t bytes = 8 + 8 * gathered.size();
  for (const auto& g : gathered) bytes += g.size();
  at::Tensor words = at::zeros({static_cast<int64_t>((bytes + 3) / 4)}, at::kFloat);
  auto* out = static_cast<uint8_t*>(words.data_ptr());
  const uint64_t count = gathered.size();
  std::memcpy(out, &count, 8);
  size_t at = 8 + 8 * gathered.size();
  for (size_t i = 0; i < gathered.size(); ++i) {
    const uint64_t n = gathered[i].size();
    std::memcpy(out + 8 + 8 * i, &n, 8);
    if (n) std::memcpy(out + at, gathered[i].data(), n);
    at += n;
  }
  return words;
}

Status unpack_gathered(const at::Tensor& words, std::vector<std::vector<uint8_t>>* gathered) {
  const auto* in = static_cast<const uint8_t*>(words.data_ptr());
  const uint64_t size = static_cast<uint64_t>(words.numel()) * 4;
  uint64_t count = 0;
  if (size < 8) return corrupt("packed allgather result shorter than its count");
  std::memcpy(&count, in, 8);
  if (count > kMaxMembers || 8 + 8 * count > size) return corrupt("packed allgather result: bad count");
  uint64_t at = 8 + 8 * count;
  std::vector<std::vector<uint8_t>> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t n = 0;
    std::memcpy(&n, in + 8 + 8 * i, 8);
    if (n > size - at) return corrupt("packed allgather result: sizes beyond its end");
    out[i].assign(in + at, in + at + n);
    at += n;
  }
  *gathered = std::move(out);
  return Status::ok();
}

void serve_result(OpContext& ctx, uint64_t seq, uint64_t epoch, const Retained& r, int peer, uint32_t group) {
  Header h;
  h.type = MsgType::kResultInfo;
  h.sender = ctx.self();
  h.epoch = epoch;
  h.seq = seq;
  h.group = group;
  ResultInfoBody info{r.result.status.code(), r.result.weight_sum, static_cast<uint64_t>(r.values.numel()),
                      r.result.contributors};
  auto body = std::make_shared<const Bytes>(encode_result_info(info));
  ctx.send(peer, Outbound{h, body, 0, body->size(), 0});
  h.type = MsgType::kResult;
  const compression::Pipeline fp32;
  send_pieces(ctx, {peer}, h, r.values, fp32, piece_elements(fp32, ctx.tuning().chunk_bytes), 0);
}

}  // namespace atl::transport::dataplane
