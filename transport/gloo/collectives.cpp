#include "transport/gloo/collectives.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "transport/collectives/le.h"
#include "transport/collectives/schedules.h"

namespace atl::transport::gloo_mesh {

namespace {

using Bytes = std::vector<uint8_t>;

// Slots within one collective: ring pieces by (step, piece), direct contributions and means
// by (phase, chunk), broadcast, hand-over and allgather messages by piece.
uint32_t slot_index(const collectives::MsgKey& key) {
  const uint32_t low = key.tag == collectives::Tag::kDirect ? key.chunk : key.piece;  // answers: 0
  if (key.step >= (1u << 13) || low >= (1u << 15)) {
    throw std::logic_error("gloo mesh: message index out of range (step " + std::to_string(key.step) + ", " +
                           std::to_string(low) + ")");
  }
  return (key.step << 15) | low;
}

}  // namespace

void GlooWire::send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
                    bool raw) {
  if (raw) {
    sends_.push_back(wire_.send(to, data, size, key.tag, slot_index(key), raw_bytes));
    return;
  }
  Bytes& out = framed_sends_.emplace_back(8 + size);
  le::put<uint64_t>(out.data(), 0, uint64_t{static_cast<uint8_t>(key.tag)} << 56 | size);
  if (size > 0) std::memcpy(out.data() + 8, data, size);
  sends_.push_back(wire_.send(to, out.data(), out.size(), key.tag, slot_index(key), raw_bytes));
}

collectives::RecvId GlooWire::post_recv(int from, const collectives::MsgKey& key, uint8_t* dst, size_t capacity,
                                        bool raw) {
  Recv& r = recvs_.emplace_back();
  r.from = from;
  r.raw = raw;
  r.dst = dst;
  r.capacity = capacity;
  r.tag = key.tag;
  if (raw) {
    r.m = wire_.recv(from, dst, capacity, key.tag, slot_index(key));
  } else {
    r.framed.resize(8 + capacity);
    r.m = wire_.recv(from, r.framed.data(), r.framed.size(), key.tag, slot_index(key));
  }
  return static_cast<collectives::RecvId>(recvs_.size() - 1);
}

bool GlooWire::ready(collectives::RecvId id) {
  Recv& r = recvs_.at(static_cast<size_t>(id));
  if (!r.done) {
    wire_.wait(r.m);
    r.done = true;
  }
  return true;
}

collectives::Payload GlooWire::take(collectives::RecvId id) {
  Recv& r = recvs_.at(static_cast<size_t>(id));
  ready(id);
  if (r.raw) {
    wire_.received(r.capacity);
    return {r.dst, r.capacity, r.tag};
  }
  const uint64_t prefix = le::get<uint64_t>(r.framed.data(), 0), len = prefix & ((uint64_t{1} << 56) - 1);
  const auto tag = static_cast<collectives::Tag>(prefix >> 56);
  if (collectives::receive_tag(tag) != collectives::receive_tag(r.tag)) {
    throw CorruptMessage("collective #" + std::to_string(wire_.seq()) + ": a message from island " +
                         std::to_string(r.from) + " with another tag");
  }
  if (len > r.framed.size() - 8) {
    throw CorruptMessage("collective #" + std::to_string(wire_.seq()) + ": a message from island " +
                         std::to_string(r.from) + " says " + std::to_string(len) + " bytes, beyond the message");
  }
  wire_.received(8 + len);
  return {r.framed.data() + 8, len, tag};
}

bool GlooWire::sent() {
  for (auto& m : sends_) wire_.wait(m);
  sends_.clear();
  return true;
}

void run(collectives::Program program, uint64_t seq) {
  try {
    program.run();
  } catch (const collectives::CorruptFrame& e) {
    throw CorruptMessage("collective #" + std::to_string(seq) + ": " + e.what());
  }
}

}  // namespace atl::transport::gloo_mesh
