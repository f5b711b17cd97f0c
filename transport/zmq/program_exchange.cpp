// The data phase of a collective over the ZeroMQ data plane: a schedule of
// transport/collectives/schedules.h run on the I/O thread over ZmqWire, the collectives::Wire
// of one attempt. See exchange.h for the contract.
//
// ZmqWire maps a schedule's message (peer, MsgKey) to one wire message (data_wire.h): type =
// the key's tag (the ids are the same), step, chunk, piece and pieces from the key. Raw fp32
// payloads carry kFlagRaw. A frame larger than chunk_bytes travels as byte ranges of one
// frame (kFlagSplit; the schedules only send such frames as single-piece messages) and is
// reassembled before the schedule sees it. Payloads are copied once into a recycled buffer
// with the checksum computed in the same pass (the link may retransmit after the schedule
// has moved on). A received raw piece is read where ZeroMQ put it: nothing is copied.
//
// Messages that arrive before the schedule has posted their receive are kept (up to a
// bound) and matched when it does; a second copy of a message, a split piece that does not
// fit, or a payload in the wrong form is dropped and logged.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <tuple>

#include "transport/collectives/schedules.h"
#include "transport/zmq/exchange.h"
#include "transport/zmq/transfer.h"

namespace atl::transport::dataplane {

double Exchange::expected_bytes(const ExchangeSetup& s) {
  const double w = static_cast<double>(s.members.size());
  const double n = static_cast<double>(s.buffer.numel());
  const double frame = static_cast<double>(s.codec->max_encoded_size(s.buffer.numel()));
  // Both schedules receive about 2 (W - 1) / W of the encoded buffer, plus headers.
  return 2.0 * (w - 1) / w * frame + 2.0 * (w - 1) * (n * 4 / static_cast<double>(s.chunk_bytes) + 1) *
                                         static_cast<double>(kHeaderBytes);
}

ZmqWire::ZmqWire(uint32_t group, uint64_t seq, uint64_t epoch, int64_t chunk_bytes, std::vector<int> members,
                 InputBackup* backup)
    : group_(group), seq_(seq), epoch_(epoch), chunk_bytes_(chunk_bytes), members_(std::move(members)),
      backup_(backup) {}

void ZmqWire::send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
                   bool raw) {
  Header h;
  h.type = static_cast<MsgType>(key.tag);
  h.sender = ctx_->self();
  h.epoch = epoch_;
  h.seq = seq_;
  h.group = group_;
  h.step = key.step;
  h.chunk = key.chunk;
  if (!raw && static_cast<int64_t>(size) > chunk_bytes_ && key.pieces == 1) {
    auto frame = ctx_->payload_buffer(size);
    std::memcpy(frame->data(), data, size);
    send_split(*ctx_, {to}, h, std::move(frame), chunk_bytes_, raw_bytes);
    return;
  }
  h.flags = raw ? kFlagRaw : 0;
  h.piece = key.piece;
  h.pieces = key.pieces;
  h.total = size;
  auto payload = ctx_->payload_buffer(size);
  const uint64_t hash = copy_and_checksum(payload->data(), data, size);
  ctx_->send(to, Outbound{h, std::move(payload), 0, size, raw_bytes, true, hash});
}

ZmqWire::Key ZmqWire::key_of(int from, const collectives::MsgKey& k) {
  return {from, static_cast<uint8_t>(k.tag), k.step, k.chunk, k.piece};
}

collectives::RecvId ZmqWire::post_recv(int from, const collectives::MsgKey& key, uint8_t*, size_t capacity,
                                       bool raw) {
  const Key k = key_of(from, key);
  Slot& s = slots_[k];
  s.posted = true;
  s.raw = raw;
  s.capacity = capacity;
  s.from = from;
  posted_.push_back(k);
  // Messages that came before the receive was posted.
  auto it = early_.find(k);
  if (it != early_.end()) {
    std::vector<Inbound> kept = std::move(it->second);
    early_.erase(it);
    for (Inbound& m : kept) {
      early_bytes_ -= m.size();
      accept(s, m);
    }
  }
  return static_cast<collectives::RecvId>(posted_.size() - 1);
}

bool ZmqWire::ready(collectives::RecvId id) {
  const Slot& s = slots_.at(posted_.at(static_cast<size_t>(id)));
  if (!s.complete) waiting_on_ = s.from;
  return s.complete;
}

collectives::Payload ZmqWire::take(collectives::RecvId id) {
  if (last_taken_ >= 0) release(slots_.at(posted_.at(static_cast<size_t>(last_taken_))));
  last_taken_ = id;
  waiting_on_ = -1;
  Slot& s = slots_.at(posted_.at(static_cast<size_t>(id)));
  if (s.split_frame) return {s.split.frame().data(), s.split.frame().size()};
  return {s.message.data(), s.message.size()};
}

void ZmqWire::will_write(int64_t begin, int64_t end) {
  if (backup_) backup_->save(begin, end);
}

void ZmqWire::release(Slot& s) {
  s.message = Inbound{};
  s.split.release();
}

void ZmqWire::deliver(Inbound& m) {
  const Header& h = m.header;
  auto drop = [&](const std::string& why) {
    ctx_->drops().drop("invalid " + std::string(msg_type_name(h.type)) + " piece",
                       why + " (collective #" + std::to_string(seq_) + " from island " + std::to_string(h.sender) + ")");
  };
  if (std::find(members_.begin(), members_.end(), h.sender) == members_.end() || h.sender == ctx_->self()) {
    return drop("not from a participant");
  }
  const bool split = (h.flags & kFlagSplit) != 0;
  const Key k{h.sender, static_cast<uint8_t>(h.type), h.step, h.chunk, split ? 0u : h.piece};
  auto it = slots_.find(k);
  if (it == slots_.end() || !it->second.posted) {
    // Not posted yet: kept for the receive that will be, within a bound (a peer cannot fill
    // this island's memory with messages nobody asks for).
    if (early_bytes_ + m.size() > kMaxEarlyBytes) return drop("too many unexpected messages");
    early_bytes_ += m.size();
    early_[k].push_back(std::move(m));
    return;
  }
  accept(it->second, m);
}

void ZmqWire::accept(Slot& s, Inbound& m) {
  const Header& h = m.header;
  auto drop = [&](const std::string& why) {
    ctx_->drops().drop("invalid " + std::string(msg_type_name(h.type)) + " piece",
                       why + " (collective #" + std::to_string(seq_) + " from island " + std::to_string(h.sender) + ")");
  };
  if (s.complete) return drop("duplicate");
  if (((h.flags & kFlagRaw) != 0) != s.raw) {
    return drop(s.raw ? "a frame where raw fp32 was expected" : "raw fp32 where a frame was expected");
  }
  bytes_in_ += kHeaderBytes + m.size();
  if ((h.flags & kFlagSplit) == 0) {
    if (m.size() > s.capacity) return drop("larger than the receive");
    s.message = std::move(m);
    s.complete = true;
    return;
  }
  if (!s.split_frame) {
    s.split_frame = true;
    s.split.reset(s.capacity);
  }
  if (Status st = s.split.accept(h, m.data()); !st.is_ok()) return drop(st.message());
  s.complete = s.split.complete();
}

namespace {

// Runs one schedule over a ZmqWire: resumed at start and after every message, as far as
// the messages it has allow.
class ProgramExchange final : public Exchange {
 public:
  using Make = std::function<collectives::Program(collectives::Wire&)>;
  ProgramExchange(ZmqWire wire, Make make) : wire_(std::move(wire)), make_(std::move(make)) {}

  void start(OpContext& ctx) override {
    wire_.bind(ctx);
    program_ = make_(wire_);
    step();
  }

  void on_message(OpContext& ctx, Inbound& m) override {
    wire_.bind(ctx);
    wire_.deliver(m);
    step();
  }

  bool done() const override { return program_.done(); }
  std::vector<int> waiting_on() const override {
    if (done() || wire_.waiting_on() < 0) return {};
    return {wire_.waiting_on()};
  }

 private:
  void step() {
    try {
      while (!program_.done() && wire_.can_resume()) program_.resume();
    } catch (const collectives::CorruptFrame& e) {
      failure_ = Status(StatusCode::kCorrupt, e.what());
    }
    bytes_in_ = wire_.bytes_in();
  }

  ZmqWire wire_;
  Make make_;
  collectives::Program program_;
};

}  // namespace

std::unique_ptr<Exchange> make_exchange(ExchangeSetup s) {
  ZmqWire wire(s.group, s.seq, s.epoch, s.chunk_bytes, s.members, s.backup);
  collectives::AllreduceSetup a;
  a.seq = s.seq;
  a.members = s.members;
  a.pos = s.pos;
  a.buffer = s.buffer;
  a.transmitted = s.transmitted;
  a.codec = s.codec;
  a.divisor = s.divisor;
  a.piece_elems = s.piece_elems;
  return std::make_unique<ProgramExchange>(
      std::move(wire), [a](collectives::Wire& w) { return collectives::allreduce(w, a); });
}

std::unique_ptr<Exchange> make_gather_exchange(uint32_t group, uint64_t seq, uint64_t epoch,
                                               std::vector<int> members, int pos,
                                               const std::vector<uint8_t>* mine, std::vector<uint64_t> sizes,
                                               std::vector<std::vector<uint8_t>>* out, int64_t chunk_bytes) {
  ZmqWire wire(group, seq, epoch, chunk_bytes, members, nullptr);
  collectives::AllgatherSetup g{std::move(members), pos, mine, std::move(sizes), out};
  return std::make_unique<ProgramExchange>(
      std::move(wire), [g](collectives::Wire& w) { return collectives::allgather(w, g); });
}

}  // namespace atl::transport::dataplane
