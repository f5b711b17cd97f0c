// A mesh: one gloo context (TCP pairs to every other member) among the members of one
// membership epoch, and the abortable point-to-point messages the collectives are built
// from. GlooGroup (gloo_group.h) builds a new mesh for every new epoch, and a new generation
// of it when a mesh of the same epoch broke.
//
// Rendezvous (Mesh::build). Every member publishes its MemberState under
// "<prefix>e<epoch>/g<generation>/state/<id>" and gloo's pair addresses under
// ".../mesh/" (ControlStore: the coordinator's store), then connects one pair to every
// other member; a member that abandons the mesh sets ".../closed" (closed_key()). The
// states say where each member is in the sequence of collectives, which settles the
// collectives that a failure left finished on some members and not on others:
// a member whose next collective is past `seq` finished it and keeps its result (donor), a
// member whose next collective is `seq` takes that result instead of running it again
// (adopter); the members that run `seq` are those whose next collective is at most `seq`.
//
// Messages (GlooWire). Every message is a gloo unbound-buffer send/recv on a slot derived from
// (group, collective seq, tag, index), so messages of different collectives never match each
// other. A sub-group (Group::subgroup) has meshes of its own (its live members, its own store
// keys and gloo context); its key is in the slots too. Waits go through Waits, which the
// group's watchdog thread can interrupt (a peer left the membership); an interrupted wait, a
// failed pair (peer closed or reset the connection) or a gloo error throws MeshBroken: the
// mesh is then discarded and rebuilt.
//
// Thread model: a Mesh and its GlooWires are used by the group's worker thread only; Waits is
// shared with the watchdog and is thread-safe.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/collectives/wire.h"
#include "transport/control_plane.h"

namespace atl::transport::gloo_mesh {

// The mesh cannot be used any more (pair failure, interrupted wait, gloo error).
class MeshBroken : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Blocking waits on gloo buffers that another thread can interrupt. Thread-safe.
class Waits {
 public:
  // Blocks until the recv (send) posted on `buf` completes. Throws MeshBroken when the wait
  // is interrupted (also when interrupt() came before it, since the last reset()) or when
  // gloo reports an error on the pair.
  void wait(::gloo::transport::UnboundBuffer& buf, int peer, bool recv);
  // Interrupts the current wait if it waits on `peer` (any peer for -1), and every later
  // wait until reset().
  void interrupt(int peer, const std::string& why);
  // The island the worker is blocked on, or -1.
  int waiting_on() const;
  // A new mesh: waits may block again (unless closed).
  void reset();
  // The group is going away: interrupts the current wait and every later one, for good.
  void close(const std::string& why);

 private:
  void interrupt_locked(const std::string& why);  // needs mu_

  mutable std::mutex mu_;
  ::gloo::transport::UnboundBuffer* current_ = nullptr;
  bool current_recv_ = false;
  int peer_ = -1;
  bool interrupted_ = false;
  bool closed_ = false;
  std::string why_;
};

// Bytes this island put on and took off the wire, for Group::bytes(). Thread-safe.
struct Counters {
  std::atomic<uint64_t> sent{0}, received{0}, raw_sent{0};
};

// gloo's framing of one unbound-buffer message, counted with its payload: the sender writes
// a ready notification and the data preamble, the receiver one ready notification (each a
// 48-byte gloo::transport::tcp::Op preamble).
inline constexpr uint64_t kGlooPreambleBytes = 48;

inline constexpr uint64_t kNoSeq = std::numeric_limits<uint64_t>::max();

// What a member announces at a mesh's rendezvous.
struct MemberState {
  uint64_t next_seq = 0;          // the collective it runs next
  uint64_t retained_seq = kNoSeq; // the finished collective whose result it keeps
};

struct MeshOptions {
  ControlPlane* control = nullptr;
  std::shared_ptr<::gloo::transport::Device> device;
  std::string prefix = "gloo/";                     // store keys
  std::chrono::milliseconds connect_timeout{30000}; // gloo's timeout for connecting the pairs
  std::chrono::milliseconds store_wait{1000};       // longest wait of one store_get (ControlStore)
  const std::atomic<bool>* stop = nullptr;          // set when the group is going away
  uint32_t group = 0;                               // 0, or the sub-group's key (in the slots)
};

class Mesh {
 public:
  // The rendezvous of `ids` (ascending, containing `self`) for (epoch, generation); see the
  // file comment. Throws RendezvousError (epoch moved on, stopping, store failure) or
  // gloo::Exception (a pair did not connect).
  static std::unique_ptr<Mesh> build(const MeshOptions& options, uint64_t epoch, uint64_t generation,
                                     std::vector<int> ids, int self, MemberState mine);

  uint64_t epoch() const { return epoch_; }
  // Closes every pair now (gloo's device thread then writes from and reads into none of this
  // mesh's buffers any more): before a collective that did not finish frees its buffers.
  // The mesh is broken afterwards.
  void close_pairs();
  // The store key a member sets when it abandons this mesh. gloo does not report a closed
  // connection to a message it is in the middle of sending or receiving, so the others'
  // watchdogs look for this key when a wait makes no progress.
  std::string closed_key() const { return scope_ + "closed"; }
  uint64_t generation() const { return generation_; }
  uint32_t group() const { return group_; }
  const std::vector<int>& ids() const { return ids_; }
  int self() const { return self_; }
  int rank(int id) const;
  // The gloo context; absent when this island is the only member.
  ::gloo::Context* context() const { return context_.get(); }

  // Members (ascending) that run collective `seq`: those whose next collective was <= seq.
  std::vector<int> participants(uint64_t seq) const;
  // The lowest member that keeps the result of `seq` while some member still runs it, or -1.
  int donor(uint64_t seq) const;
  // Members (not self) whose next collective is `seq`: the ones a donor of `seq` serves.
  std::vector<int> adopters(uint64_t seq) const;

 private:
  Mesh() = default;
  uint64_t epoch_ = 0, generation_ = 0;
  uint32_t group_ = 0;
  std::string scope_;                // store keys of this mesh: "<prefix>e<epoch>/g<generation>/"
  std::vector<int> ids_;
  int self_ = -1;
  std::vector<MemberState> states_;  // by rank
  std::shared_ptr<::gloo::Context> context_;
};

// The collectives::Wire of collective `seq` on a mesh, on which GlooGroup runs
// collectives::attempt (rendezvous, hand-over and data phase, written once for every
// networked transport: transport/collectives/attempt.h) and collectives::hand_over.
//
// Blocking: ready() waits. Raw fp32 pieces go straight from and into the caller's memory;
// other payloads (compression frames, HELLO, RESULT_INFO, allgather bytes) travel as one
// message each behind a u64 (tag << 56 | length), since a gloo receive says neither how much
// arrived nor which of a rendezvous' answers it was. Bytes are counted in Counters as they
// are posted (gloo's framing) and taken (the payload, which only its prefix measures).
//
// A frame that does not decode throws collectives::CorruptFrame. Mesh failures throw MeshBroken.
class GlooWire final : public collectives::Wire {
 public:
  GlooWire(Mesh& mesh, Waits& waits, Counters& counters, uint64_t seq)
      : mesh_(mesh), waits_(waits), counters_(counters), seq_(seq) {}
  int self() const override { return mesh_.self(); }
  bool raw_fp32() const override { return true; }
  void send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
            bool raw) override;
  collectives::RecvId post_recv(int from, const collectives::MsgKey& key, uint8_t* dst, size_t capacity,
                                bool raw) override;
  bool ready(collectives::RecvId id) override;
  collectives::Payload take(collectives::RecvId id) override;
  bool sent() override;
  void data_phase(double bytes) override {
    if (on_data_phase) on_data_phase(bytes);
  }
  // Called when a data phase begins (GlooGroup starts its suspect timer).
  std::function<void(double)> on_data_phase;

 private:
  struct Message {
    std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
    int peer = -1;
  };
  struct Recv {
    Message m;
    bool raw = false;
    bool done = false;
    collectives::Tag tag = collectives::Tag::kRing;
    uint8_t* dst = nullptr;
    size_t capacity = 0;
    std::vector<uint8_t> framed;  // not raw: u64 (tag << 56 | length), then the bytes
  };
  // Posts a recv (or a send) of `n` bytes at `ptr` from (to) island `peer` on `key`'s slot
  // (the memory stays untouched until it completes) and counts gloo's framing.
  Message post(bool recv, int peer, void* ptr, size_t n, const collectives::MsgKey& key);

  Mesh& mesh_;
  Waits& waits_;
  Counters& counters_;
  const uint64_t seq_;
  std::vector<Message> sends_;
  std::vector<std::vector<uint8_t>> framed_sends_;
  std::vector<Recv> recvs_;
};

}  // namespace atl::transport::gloo_mesh
