#include "transport/gloo/mesh.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "src/base/bytes.h"
#include "transport/collectives/schedules.h"
#include "transport/gloo/control_store.h"

namespace atl::transport::gloo_mesh {

namespace {

// gloo waits with a timeout are fatal to the whole context when they expire, so waits are
// unbounded here and the watchdog (GlooGroup) interrupts them instead.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365);

// A MemberState under its store key: next_seq u64 | retained_seq u64.
std::vector<char> encode_state(const MemberState& s) {
  std::vector<char> out(16);
  bytes::put_at(reinterpret_cast<uint8_t*>(out.data()), 0, s.next_seq);
  bytes::put_at(reinterpret_cast<uint8_t*>(out.data()), 8, s.retained_seq);
  return out;
}

MemberState decode_state(const std::vector<char>& bytes, const std::string& key) {
  if (bytes.size() != 16) throw RendezvousError("malformed mesh state under '" + key + "'");
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  return {bytes::get_at<uint64_t>(p, 0), bytes::get_at<uint64_t>(p, 8)};
}

// The slot of message `key` of collective `seq` in group `group`: group (low 12 bits) | seq
// (low 20 bits) | tag (4 bits) | step (13 bits) | index (15 bits). A mesh runs one collective
// at a time (and hands over the one before), so 20 bits of seq tell them apart. Ring pieces
// are indexed by (step, piece), direct contributions and means by (phase, chunk), broadcast,
// hand-over and allgather messages by piece (answers: 0).
uint64_t slot(uint32_t group, uint64_t seq, const collectives::MsgKey& key) {
  const uint32_t low = key.tag == collectives::Tag::kDirect ? key.chunk : key.piece;
  if (key.step >= (1u << 13) || low >= (1u << 15)) {
    throw std::logic_error("gloo mesh: message index out of range (step " + std::to_string(key.step) + ", " +
                           std::to_string(low) + ")");
  }
  return uint64_t{group & 0xfffu} << 52 | (seq & 0xfffffu) << 32 |
         static_cast<uint64_t>(collectives::receive_tag(key.tag)) << 28 | key.step << 15 | low;
}

}  // namespace

void Waits::wait(::gloo::transport::UnboundBuffer& buf, int peer, bool recv) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (interrupted_) throw MeshBroken(why_);
    current_ = &buf;
    current_recv_ = recv;
    peer_ = peer;
  }
  bool completed = false;
  std::string error;
  try {
    // An interrupt() between the unlock above and this call is not lost: gloo keeps the
    // abort flag until the next wait consumes it.
    completed = recv ? buf.waitRecv(nullptr, kForever) : buf.waitSend(nullptr, kForever);
  } catch (const ::gloo::Exception& e) {
    error = std::string(recv ? "receiving from" : "sending to") + " island " + std::to_string(peer) + ": " + e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  current_ = nullptr;
  peer_ = -1;
  if (!error.empty()) throw MeshBroken(error);
  if (!completed || interrupted_) throw MeshBroken(why_.empty() ? "wait interrupted" : why_);
}

void Waits::interrupt(int peer, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer < 0 || peer_ == peer) interrupt_locked(why);
}

void Waits::interrupt_locked(const std::string& why) {
  if (!interrupted_) why_ = why;
  interrupted_ = true;
  if (current_) {
    if (current_recv_) current_->abortWaitRecv();
    else current_->abortWaitSend();
  }
}

int Waits::waiting_on() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_;
}

void Waits::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  interrupted_ = false;
  why_.clear();
}

void Waits::close(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  interrupt_locked(why);
}

void Mesh::close_pairs() {
  if (!context_) return;
  for (int r = 0; r < static_cast<int>(ids_.size()); ++r) {
    if (ids_[static_cast<size_t>(r)] == self_) continue;
    if (auto& pair = context_->getPair(r)) pair->close();
  }
}

std::unique_ptr<Mesh> Mesh::build(const MeshOptions& o, uint64_t epoch, uint64_t generation,
                                  std::vector<int> ids, int self, MemberState mine) {
  std::unique_ptr<Mesh> m(new Mesh);
  m->epoch_ = epoch;
  m->generation_ = generation;
  m->group_ = o.group;
  m->ids_ = std::move(ids);
  m->self_ = self;
  const int rank = m->rank(self);
  const int size = static_cast<int>(m->ids_.size());
  m->scope_ = o.prefix + "e" + std::to_string(epoch) + "/g" + std::to_string(generation) + "/";
  ControlStore store(*o.control, m->scope_, epoch, *o.stop, o.store_wait);
  store.set("state/" + std::to_string(self), encode_state(mine));
  if (size > 1) {
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    context->setTimeout(o.connect_timeout);
    ::gloo::rendezvous::PrefixStore mesh_store("mesh", store);
    auto device = o.device;
    context->connectFullMesh(mesh_store, device);
    m->context_ = std::move(context);
  }
  for (int id : m->ids_) {
    const std::string key = "state/" + std::to_string(id);
    m->states_.push_back(decode_state(store.get(key), key));
  }
  return m;
}

int Mesh::rank(int id) const {
  auto it = std::find(ids_.begin(), ids_.end(), id);
  if (it == ids_.end()) throw std::logic_error("island " + std::to_string(id) + " is not a mesh member");
  return static_cast<int>(it - ids_.begin());
}

std::vector<int> Mesh::participants(uint64_t seq) const {
  std::vector<int> out;
  for (size_t r = 0; r < ids_.size(); ++r) {
    if (states_[r].next_seq <= seq) out.push_back(ids_[r]);
  }
  return out;
}

int Mesh::donor(uint64_t seq) const {
  bool needed = false;
  int donor = -1;
  for (size_t r = 0; r < ids_.size(); ++r) {
    needed = needed || states_[r].next_seq == seq;
    if (donor < 0 && states_[r].retained_seq == seq) donor = ids_[r];
  }
  return needed ? donor : -1;
}

std::vector<int> Mesh::adopters(uint64_t seq) const {
  std::vector<int> out;
  for (size_t r = 0; r < ids_.size(); ++r) {
    if (states_[r].next_seq == seq && ids_[r] != self_) out.push_back(ids_[r]);
  }
  return out;
}

GlooWire::Message GlooWire::post(bool recv, int peer, void* ptr, size_t n, const collectives::MsgKey& key) {
  Message m{mesh_.context()->createUnboundBuffer(ptr, n), peer};
  try {
    if (recv) m.buf->recv(mesh_.rank(peer), slot(mesh_.group(), seq_, key), 0, n);
    else m.buf->send(mesh_.rank(peer), slot(mesh_.group(), seq_, key), 0, n);
  } catch (const ::gloo::Exception& e) {
    throw MeshBroken(std::string(recv ? "receiving from" : "sending to") + " island " + std::to_string(peer) + ": " +
                     e.what());
  }
  if (recv) {
    counters_.sent += kGlooPreambleBytes;
  } else {
    counters_.sent += n + 2 * kGlooPreambleBytes;
    counters_.received += kGlooPreambleBytes;
  }
  return m;
}

void GlooWire::send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
                    bool raw) {
  void* ptr = const_cast<uint8_t*>(data);
  if (!raw) {
    std::vector<uint8_t>& out = framed_sends_.emplace_back(8 + size);
    bytes::put_at<uint64_t>(out.data(), 0, uint64_t{static_cast<uint8_t>(key.tag)} << 56 | size);
    if (size > 0) std::memcpy(out.data() + 8, data, size);
    ptr = out.data();
    size = out.size();
  }
  sends_.push_back(post(false, to, ptr, size, key));
  counters_.raw_sent += raw_bytes;
}

collectives::RecvId GlooWire::post_recv(int from, const collectives::MsgKey& key, uint8_t* dst, size_t capacity,
                                        bool raw) {
  Recv& r = recvs_.emplace_back();
  r.raw = raw;
  r.tag = key.tag;
  r.dst = dst;
  r.capacity = capacity;
  if (!raw) r.framed.resize(8 + capacity);
  r.m = raw ? post(true, from, dst, capacity, key) : post(true, from, r.framed.data(), r.framed.size(), key);
  return static_cast<collectives::RecvId>(recvs_.size() - 1);
}

bool GlooWire::ready(collectives::RecvId id) {
  Recv& r = recvs_.at(static_cast<size_t>(id));
  if (!r.done) {
    waits_.wait(*r.m.buf, r.m.peer, true);
    r.done = true;
  }
  return true;
}

collectives::Payload GlooWire::take(collectives::RecvId id) {
  Recv& r = recvs_.at(static_cast<size_t>(id));
  ready(id);
  uint64_t len = r.capacity;
  collectives::Tag tag = r.tag;
  if (!r.raw) {
    const uint64_t prefix = bytes::get_at<uint64_t>(r.framed.data(), 0);
    len = prefix & ((uint64_t{1} << 56) - 1);
    tag = static_cast<collectives::Tag>(prefix >> 56);
    if (collectives::receive_tag(tag) != collectives::receive_tag(r.tag)) {
      throw collectives::CorruptFrame("a message from island " + std::to_string(r.m.peer) + " with another tag");
    }
    if (len > r.framed.size() - 8) {
      throw collectives::CorruptFrame("a message from island " + std::to_string(r.m.peer) + " says " +
                                      std::to_string(len) + " bytes, beyond the message");
    }
  }
  counters_.received += (r.raw ? len : 8 + len) + 2 * kGlooPreambleBytes;
  return {r.raw ? r.dst : r.framed.data() + 8, len, tag};
}

bool GlooWire::sent() {
  for (auto& m : sends_) waits_.wait(*m.buf, m.peer, false);
  sends_.clear();
  return true;
}

}  // namespace atl::transport::gloo_mesh
