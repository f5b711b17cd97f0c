// ZmqWire (zmq_wire.h): one collective's messages over the ZeroMQ data plane.
//
// ZmqWire maps a program's message (peer, MsgKey) to one wire message (data_wire.h): type =
// the key's tag (the ids are the same), step, chunk, piece and pieces from the key. The
// three answers of a rendezvous (HELLO, ABSENT, RESULT_INFO) match the one receive posted
// for a member's answer (collectives::receive_tag); the payload says which it was. Raw fp32
// payloads carry kFlagRaw. A frame larger than chunk_bytes travels as byte ranges of one
// frame (kFlagSplit; header: offset = first byte, total = frame bytes; the schedules only send
// such frames as single-piece messages; lossy codecs encode the whole range once, as the
// in-process reference does, or block scales and top-k would differ) and is reassembled
// before the schedule sees it. A payload is copied once into a recycled buffer,
// with the checksum computed in the same pass (the link may retransmit after the schedule
// has moved on and the caller's buffer has changed), unless it is a raw piece of at least
// kMinKeptBytes from memory that stays unchanged while referenced: the all-reduce's result
// tensor (each region is written once, before it is sent; a later attempt writes a new
// tensor) or a kept piece; those are sent from where they are, kept alive by the link until
// acknowledged. A received raw piece is read where ZeroMQ put it: nothing is copied.
//
// Messages that arrive before the schedule has posted their receive are kept (up to a
// bound) and matched when it does; a second copy of a message, a split piece that does not
// fit, or a payload in the wrong form is dropped and logged.
#include "transport/zmq/zmq_wire.h"

#include <algorithm>
#include <cstring>

#include "src/base/hash.h"

namespace atl::transport::dataplane {

ZmqWire::ZmqWire(uint32_t group, uint64_t seq, uint64_t epoch, int64_t chunk_bytes, std::vector<int> members,
                 at::Tensor result)
    : group_(group), seq_(seq), epoch_(epoch), chunk_bytes_(chunk_bytes), members_(std::move(members)),
      result_(result.defined() ? std::make_shared<const at::Tensor>(std::move(result)) : nullptr) {}

std::shared_ptr<const void> ZmqWire::owner_of(const uint8_t* data, size_t size) const {
  if (result_) {
    const auto* begin = static_cast<const uint8_t*>(result_->data_ptr());
    if (data >= begin && data + size <= begin + result_->numel() * sizeof(float)) return result_;
  }
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {  // a forward follows its keep
    if (it->message->data() == data) return it->message;
  }
  return nullptr;
}

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
  const bool answer = collectives::receive_tag(key.tag) == collectives::Tag::kHello;  // never split (< 17 kB)
  if (!raw && !answer && static_cast<int64_t>(size) > chunk_bytes_ && key.pieces == 1) {
    return send_split(to, h, data, size, raw_bytes);
  }
  h.flags = raw ? kFlagRaw : 0;
  h.piece = key.piece;
  h.pieces = key.pieces;
  h.total = size;
  if (raw && size >= kMinKeptBytes) {
    if (std::shared_ptr<const void> owner = owner_of(data, size)) {  // zero copy
      // A kept piece forwarded whole was hashed when its receipt was verified.
      const auto* kept = owner == result_ ? nullptr : static_cast<const Inbound*>(owner.get());
      const uint64_t hash = kept && kept->data() == data && kept->size() == size ? kept->payload_hash
                                                                                 : checksum_payload(data, size);
      return ctx_->send(to, Outbound{h, nullptr, 0, size, raw_bytes, true, hash, data, std::move(owner)});
    }
  }
  auto payload = ctx_->payload_buffer(size);
  // checksum_payload(payload) while copying: each block is hashed while it is still in cache.
  const uint64_t hash = copy_and_xxh3_64(payload->data(), data, size);
  ctx_->send(to, Outbound{h, std::move(payload), 0, size, raw_bytes, true, hash});
}

void ZmqWire::send_split(int to, Header h, const uint8_t* data, size_t size, uint64_t raw_bytes) {
  auto frame = ctx_->payload_buffer(size);
  std::memcpy(frame->data(), data, size);
  const size_t step = static_cast<size_t>(std::max<int64_t>(1, chunk_bytes_));
  h.flags = kFlagSplit;
  h.pieces = static_cast<uint32_t>(std::max<size_t>(1, (size + step - 1) / step));
  h.total = size;
  for (uint32_t k = 0; k < h.pieces; ++k) {
    h.piece = k;
    h.offset = k * step;
    const size_t len = std::min(step, size - static_cast<size_t>(h.offset));
    // raw_sent: the frame's fp32 size, attributed to its first piece.
    ctx_->send(to, Outbound{h, frame, static_cast<size_t>(h.offset), len, k == 0 ? raw_bytes : 0});
  }
}

ZmqWire::Key ZmqWire::key_of(int from, const collectives::MsgKey& k) {
  return {from, static_cast<uint8_t>(collectives::receive_tag(k.tag)), k.step, k.chunk, k.piece};
}

collectives::RecvId ZmqWire::post_recv(int from, const collectives::MsgKey& key, uint8_t*, size_t capacity,
                                       bool raw) {
  const Key k = key_of(from, key);
  Slot& s = slots_[k];
  s.raw = raw;
  s.capacity = capacity;
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
  const Key& k = posted_.at(static_cast<size_t>(id));
  const bool complete = slots_.at(k).complete;
  if (!complete) waiting_on_ = std::get<0>(k);  // the sender
  return complete;
}

collectives::Payload ZmqWire::take(collectives::RecvId id) {
  if (last_taken_ >= 0) release(slots_.at(posted_.at(static_cast<size_t>(last_taken_))));
  last_taken_ = id;
  waiting_on_ = -1;
  Slot& s = slots_.at(posted_.at(static_cast<size_t>(id)));
  if (s.split_frame) {  // never an answer: the key's tag is the message's
    return {s.frame.data(), s.frame.size(), static_cast<collectives::Tag>(std::get<1>(posted_[id]))};
  }
  return {s.message.data(), s.message.size(), static_cast<collectives::Tag>(s.message.header.type)};
}

void ZmqWire::data_phase(double bytes) {
  // Plus a header per chunk_bytes of payload and per message of every step.
  const double w = static_cast<double>(members_.size());
  data_phase_ = true;
  expected_bytes_ = bytes + (bytes / static_cast<double>(chunk_bytes_) + 2 * (w - 1)) * kHeaderBytes;
}

bool ZmqWire::keep(collectives::RecvId id, int64_t begin, int64_t) {
  Slot& s = slots_.at(posted_.at(static_cast<size_t>(id)));
  // A small message's bytes live inside the message object, and move with it.
  if (s.split_frame || s.message.size() < kMinKeptBytes) return false;
  kept_.push_back({begin, std::make_shared<const Inbound>(std::move(s.message))});
  return true;
}

void ZmqWire::release(Slot& s) {
  s.message = Inbound{};
  Bytes().swap(s.frame);
}

void ZmqWire::drop(const Header& h, const std::string& why) {
  ctx_->drops().drop("invalid " + std::string(msg_type_name(h.type)) + " piece",
                     why + " (collective #" + std::to_string(seq_) + " from island " + std::to_string(h.sender) + ")");
}

void ZmqWire::deliver(Inbound& m) {
  const Header& h = m.header;
  if (!contains(members_, h.sender) || h.sender == ctx_->self()) return drop(h, "not from a participant");
  const bool split = (h.flags & kFlagSplit) != 0;
  const Key k = key_of(h.sender, {static_cast<collectives::Tag>(h.type), h.step, h.chunk, split ? 0u : h.piece});
  auto it = slots_.find(k);
  if (it == slots_.end()) {
    // Not posted yet: kept for the receive that will be, within a bound (a peer cannot fill
    // this island's memory with messages nobody asks for).
    if (early_bytes_ + m.size() > kMaxEarlyBytes) return drop(h, "too many unexpected messages");
    early_bytes_ += m.size();
    early_[k].push_back(std::move(m));
    return;
  }
  accept(it->second, m);
}

void ZmqWire::accept(Slot& s, Inbound& m) {
  const Header& h = m.header;
  if (s.complete) return drop(h, "duplicate");
  if (((h.flags & kFlagRaw) != 0) != s.raw) {
    return drop(h, s.raw ? "a frame where raw fp32 was expected" : "raw fp32 where a frame was expected");
  }
  bytes_in_ += kHeaderBytes + m.size();
  if ((h.flags & kFlagSplit) == 0) {
    if (s.split_frame) return drop(h, "a whole frame where the rest of a split frame was expected");
    if (m.size() > s.capacity) return drop(h, "larger than the receive");
    s.message = std::move(m);
    s.complete = true;
    return;
  }
  // A piece of a split frame (at most `capacity` bytes): checked (total, count, index
  // unseen), then copied into place.
  s.split_frame = true;
  if (h.total == 0 || h.total > s.capacity) return drop(h, "split frame larger than the codec allows");
  if (s.pieces == 0) {
    if (h.pieces == 0 || h.pieces > h.total) return drop(h, "piece count out of range");
    s.pieces = h.pieces;
    s.seen.assign(s.pieces, false);
    s.frame.assign(h.total, 0);
  }
  if (h.pieces != s.pieces || h.total != s.frame.size()) return drop(h, "split frame geometry disagrees");
  if (s.seen[h.piece]) return drop(h, "duplicate piece");
  s.seen[h.piece] = true;
  if (h.payload_len) std::memcpy(s.frame.data() + h.offset, m.data(), h.payload_len);
  s.complete = ++s.received == s.pieces;
}

}  // namespace atl::transport::dataplane
