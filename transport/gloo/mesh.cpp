#include "transport/gloo/mesh.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "transport/gloo/control_store.h"

namespace atl::transport::gloo_mesh {

namespace {

// gloo waits with a timeout are fatal to the whole context when they expire, so waits are
// unbounded here and the watchdog (GlooGroup) interrupts them instead.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365);

std::vector<char> encode_state(const MemberState& s) {
  std::vector<char> out(16);
  std::memcpy(out.data(), &s.next_seq, 8);  // little-endian hosts only (static_assert below)
  std::memcpy(out.data() + 8, &s.retained_seq, 8);
  return out;
}

MemberState decode_state(const std::vector<char>& bytes, const std::string& key) {
  if (bytes.size() != 16) throw RendezvousError("malformed mesh state under '" + key + "'");
  MemberState s;
  std::memcpy(&s.next_seq, bytes.data(), 8);
  std::memcpy(&s.retained_seq, bytes.data() + 8, 8);
  return s;
}

static_assert(std::endian::native == std::endian::little, "the mesh state is little-endian");

}  // namespace

void Waits::recv(::gloo::transport::UnboundBuffer& buf, int peer) { wait(buf, peer, true); }
void Waits::send(::gloo::transport::UnboundBuffer& buf, int peer) { wait(buf, peer, false); }

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

bool Waits::interrupt(int peer, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (peer >= 0 && peer_ != peer) return false;
  interrupt_locked(why);
  return true;
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

uint64_t Wire::slot(collectives::Tag tag, uint32_t index) const {
  if (index >= (1u << 28)) {
    throw std::logic_error("gloo mesh: slot out of range (collective " + std::to_string(seq_) + ", index " +
                           std::to_string(index) + ")");
  }
  // group (low 12 bits) | seq (low 20 bits) | tag (4 bits) | index (28 bits). A mesh runs one
  // collective at a time (and hands over the one before), so 20 bits of seq tell them apart.
  const uint64_t group = mesh_.group() & 0xfffu, seq = seq_ & 0xfffffu;
  return (group << 52) | (seq << 32) | (static_cast<uint64_t>(collectives::receive_tag(tag)) << 28) | index;
}

Wire::Message Wire::send(int to, const void* ptr, size_t bytes, collectives::Tag tag, uint32_t index,
                         uint64_t raw) {
  Message m;
  m.peer = to;
  m.buf = mesh_.context()->createUnboundBuffer(const_cast<void*>(ptr), bytes);
  try {
    m.buf->send(mesh_.rank(to), slot(tag, index), 0, bytes);
  } catch (const ::gloo::Exception& e) {
    throw MeshBroken("sending to island " + std::to_string(to) + ": " + e.what());
  }
  counters_.sent += bytes + 2 * kGlooPreambleBytes;
  counters_.received += kGlooPreambleBytes;
  counters_.raw_sent += raw;
  return m;
}

Wire::Message Wire::recv(int from, void* ptr, size_t capacity, collectives::Tag tag, uint32_t index) {
  Message m;
  m.peer = from;
  m.recv = true;
  m.buf = mesh_.context()->createUnboundBuffer(ptr, capacity);
  try {
    m.buf->recv(mesh_.rank(from), slot(tag, index), 0, capacity);
  } catch (const ::gloo::Exception& e) {
    throw MeshBroken("receiving from island " + std::to_string(from) + ": " + e.what());
  }
  counters_.sent += kGlooPreambleBytes;
  return m;
}

void Wire::wait(Message& m) {
  if (m.recv) waits_.recv(*m.buf, m.peer);
  else waits_.send(*m.buf, m.peer);
}

void Wire::received(uint64_t payload_bytes) { counters_.received += payload_bytes + 2 * kGlooPreambleBytes; }

}  // namespace atl::transport::gloo_mesh
