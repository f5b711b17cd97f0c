#include "transport/gloo/collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <optional>


namespace atl::transport::gloo_mesh {

namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kHelloBytes = 40;
constexpr size_t kMaxResultIds = 4096;  // as the control protocol's membership limit

template <typename T>
void put(Bytes& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(const Bytes& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

}  // namespace

std::vector<Hello> exchange_hello(Wire& wire, const std::vector<int>& parts, const Hello& mine) {
  Bytes out(kHelloBytes, 0);
  put<uint8_t>(out, 0, mine.kind);
  put<int32_t>(out, 4, mine.root);
  put<uint64_t>(out, 8, mine.numel);
  put<double>(out, 16, mine.weight);
  put<uint64_t>(out, 24, mine.codec);
  put<uint64_t>(out, 32, mine.piece_elems);
  const int w = static_cast<int>(parts.size());
  std::vector<Bytes> in(w, Bytes(kHelloBytes));
  std::vector<Wire::Message> recvs(w), sends(w);
  for (int q = 0; q < w; ++q) {
    if (parts[q] == wire.self()) continue;
    recvs[q] = wire.recv(parts[q], in[q].data(), kHelloBytes, Kind::kHello, 0);
    sends[q] = wire.send(parts[q], out.data(), kHelloBytes, Kind::kHello, 0, 0);
  }
  std::vector<Hello> hellos(w, mine);
  for (int q = 0; q < w; ++q) {
    if (parts[q] == wire.self()) continue;
    wire.wait(recvs[q]);
    wire.received(kHelloBytes);
    Hello& h = hellos[q];
    h.kind = get<uint8_t>(in[q], 0);
    h.root = get<int32_t>(in[q], 4);
    h.numel = get<uint64_t>(in[q], 8);
    h.weight = get<double>(in[q], 16);
    h.codec = get<uint64_t>(in[q], 24);
    h.piece_elems = get<uint64_t>(in[q], 32);
  }
  for (int q = 0; q < w; ++q) {
    if (parts[q] != wire.self()) wire.wait(sends[q]);
  }
  return hellos;
}

// Slots within one collective: ring pieces by (step, piece), direct contributions and means
// by (phase, chunk), broadcast and allgather messages by piece.
namespace {
uint32_t slot_index(const collectives::MsgKey& key) {
  const uint32_t low = key.tag == collectives::Tag::kDirect ? key.chunk : key.piece;
  if (key.step >= (1u << 13) || low >= (1u << 15)) {
    throw std::logic_error("gloo mesh: message index out of range (step " + std::to_string(key.step) + ", " +
                           std::to_string(low) + ")");
  }
  return (key.step << 15) | low;
}

Kind kind_of(collectives::Tag tag) {
  switch (tag) {
    case collectives::Tag::kRing: return Kind::kRing;
    case collectives::Tag::kDirect: return Kind::kDirect;
    case collectives::Tag::kBroadcast: return Kind::kBroadcast;
    case collectives::Tag::kGather: return Kind::kGather;
  }
  throw std::logic_error("gloo mesh: unknown message tag");
}
}  // namespace

void GlooWire::send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
                    bool raw) {
  if (raw) {
    sends_.push_back(wire_.send(to, data, size, kind_of(key.tag), slot_index(key), raw_bytes));
    return;
  }
  Bytes& out = framed_sends_.emplace_back(8 + size);
  put<uint64_t>(out, 0, size);
  if (size > 0) std::memcpy(out.data() + 8, data, size);
  sends_.push_back(wire_.send(to, out.data(), out.size(), kind_of(key.tag), slot_index(key), raw_bytes));
}

collectives::RecvId GlooWire::post_recv(int from, const collectives::MsgKey& key, uint8_t* dst, size_t capacity,
                                        bool raw) {
  Recv& r = recvs_.emplace_back();
  r.from = from;
  r.raw = raw;
  r.dst = dst;
  r.capacity = capacity;
  if (raw) {
    r.m = wire_.recv(from, dst, capacity, kind_of(key.tag), slot_index(key));
  } else {
    r.framed.resize(8 + capacity);
    r.m = wire_.recv(from, r.framed.data(), r.framed.size(), kind_of(key.tag), slot_index(key));
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
    return {r.dst, r.capacity};
  }
  const uint64_t len = get<uint64_t>(r.framed, 0);
  if (len > r.framed.size() - 8) {
    throw CorruptMessage("collective #" + std::to_string(wire_.seq()) + ": a message from island " +
                         std::to_string(r.from) + " says " + std::to_string(len) + " bytes, beyond the message");
  }
  wire_.received(8 + len);
  return {r.framed.data() + 8, len};
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

// Outcome layout: status u8 · 3 zero bytes · count u32 · weight_sum f64 · numel u64 · ids i32 × count.
namespace {

Bytes encode_outcome(const CollectiveResult& result, uint64_t numel) {
  const size_t count = result.contributors.size();
  Bytes info(24 + 4 * count, 0);
  put<uint8_t>(info, 0, static_cast<uint8_t>(result.status.code()));
  put<uint32_t>(info, 4, static_cast<uint32_t>(count));
  put<double>(info, 8, result.weight_sum);
  put<uint64_t>(info, 16, numel);
  for (size_t i = 0; i < count; ++i) put<int32_t>(info, 24 + 4 * i, result.contributors[i]);
  return info;
}

// Receives an outcome from `from` (message kResult 0); `numel` is what it says of the
// values' size. Throws CorruptMessage.
CollectiveResult receive_outcome(Wire& wire, int from, uint64_t* numel) {
  Bytes info(24 + 4 * kMaxResultIds);
  Wire::Message a = wire.recv(from, info.data(), info.size(), Kind::kResult, 0);
  wire.wait(a);
  const uint32_t count = get<uint32_t>(info, 4);
  if (count > kMaxResultIds) {
    throw CorruptMessage("collective #" + std::to_string(wire.seq()) + ": island " + std::to_string(from) +
                         " handed over a result of " + std::to_string(count) + " contributors");
  }
  wire.received(24 + 4 * count);
  CollectiveResult r;
  const auto code = static_cast<StatusCode>(get<uint8_t>(info, 0));
  if (code != StatusCode::kOk) {
    r.status = Status(code, "collective #" + std::to_string(wire.seq()) + " lost members (result taken from island " +
                                std::to_string(from) + ")");
  }
  r.weight_sum = get<double>(info, 8);
  *numel = get<uint64_t>(info, 16);
  for (uint32_t i = 0; i < count; ++i) r.contributors.push_back(get<int32_t>(info, 24 + 4 * i));
  return r;
}

CorruptMessage wrong_size(const Wire& wire, int from) {
  return CorruptMessage("collective #" + std::to_string(wire.seq()) + ": island " + std::to_string(from) +
                        " handed over a result of another size");
}

}  // namespace

void send_result(Wire& wire, int to, const CollectiveResult& result, const at::Tensor& values) {
  const Bytes info = encode_outcome(result, static_cast<uint64_t>(values.numel()));
  const uint64_t fp32 = static_cast<uint64_t>(values.numel()) * sizeof(float);
  Wire::Message a = wire.send(to, info.data(), info.size(), Kind::kResult, 0, 0);
  Wire::Message b = wire.send(to, values.data_ptr<float>(), fp32, Kind::kResult, 1, fp32);
  wire.wait(a);
  wire.wait(b);
}

CollectiveResult receive_result(Wire& wire, int from, at::Tensor buffer) {
  const uint64_t fp32 = static_cast<uint64_t>(buffer.numel()) * sizeof(float);
  Wire::Message b = wire.recv(from, buffer.data_ptr<float>(), fp32, Kind::kResult, 1);
  uint64_t numel = 0;
  CollectiveResult r = receive_outcome(wire, from, &numel);
  if (numel != static_cast<uint64_t>(buffer.numel())) throw wrong_size(wire, from);
  wire.wait(b);
  wire.received(fp32);
  return r;
}

// After the outcome (numel = the number of byte strings): their sizes (u64 each), then
// all of them in one message.
void send_gathered(Wire& wire, int to, const CollectiveResult& result,
                   const std::vector<std::vector<uint8_t>>& gathered) {
  const Bytes info = encode_outcome(result, gathered.size());
  Bytes sizes(8 * gathered.size()), all;
  for (size_t i = 0; i < gathered.size(); ++i) {
    put<uint64_t>(sizes, 8 * i, gathered[i].size());
    all.insert(all.end(), gathered[i].begin(), gathered[i].end());
  }
  Wire::Message a = wire.send(to, info.data(), info.size(), Kind::kResult, 0, 0);
  Wire::Message b = wire.send(to, sizes.data(), sizes.size(), Kind::kResult, 1, 0);
  std::optional<Wire::Message> c;  // nothing at all to send when every string is empty
  if (!all.empty()) c = wire.send(to, all.data(), all.size(), Kind::kResult, 2, 0);
  wire.wait(a);
  wire.wait(b);
  if (c) wire.wait(*c);
}

CollectiveResult receive_gathered(Wire& wire, int from, std::vector<std::vector<uint8_t>>& gathered) {
  uint64_t count = 0;
  CollectiveResult r = receive_outcome(wire, from, &count);
  if (count != r.contributors.size()) throw wrong_size(wire, from);
  Bytes sizes(8 * count);
  Wire::Message b = wire.recv(from, sizes.data(), sizes.size(), Kind::kResult, 1);
  wire.wait(b);
  wire.received(sizes.size());
  uint64_t total = 0;
  for (uint64_t i = 0; i < count; ++i) {
    total += get<uint64_t>(sizes, 8 * i);
    if (total > (uint64_t{1} << 36)) throw wrong_size(wire, from);
  }
  Bytes all(total);
  if (total > 0) {
    Wire::Message c = wire.recv(from, all.data(), all.size(), Kind::kResult, 2);
    wire.wait(c);
    wire.received(total);
  }
  gathered.assign(count, {});
  uint64_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t n = get<uint64_t>(sizes, 8 * i);
    gathered[i].assign(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return r;
}

}  // namespace atl::transport::gloo_mesh
