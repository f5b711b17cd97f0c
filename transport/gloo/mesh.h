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
// Messages (Wire). Every message is a gloo unbound-buffer send/recv on a slot derived from
// (group, collective seq, tag, index), so messages of different collectives never match each
// other. A sub-group (Group::subgroup) has meshes of its own (its live members, its own store
// keys and gloo context); its key is in the slots too. Waits go through Waits, which the
// group's watchdog thread can interrupt (a peer left the membership); an interrupted wait, a
// failed pair (peer closed or reset the connection) or a gloo error throws MeshBroken: the
// mesh is then discarded and rebuilt.
//
// Thread model: a Mesh and its Wires are used by the group's worker thread only; Waits is
// shared with the watchdog and is thread-safe.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <cstdint>
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

// A peer's message did not decode (a frame that fails its checksum or does not fit).
class CorruptMessage : public MeshBroken {
 public:
  using MeshBroken::MeshBroken;
};

// Blocking waits on gloo buffers that another thread can interrupt. Thread-safe.
class Waits {
 public:
  // Blocks until the recv (send) posted on `buf` completes. Throws MeshBroken when the wait
  // is interrupted (also when interrupt() came before it, since the last reset()) or when
  // gloo reports an error on the pair.
  void recv(::gloo::transport::UnboundBuffer& buf, int peer);
  void send(::gloo::transport::UnboundBuffer& buf, int peer);
  // Interrupts the current wait if it waits on `peer` (any peer for -1), and every later
  // wait until reset(). Returns whether it did.
  bool interrupt(int peer, const std::string& why);
  // The island the worker is blocked on, or -1.
  int waiting_on() const;
  // A new mesh: waits may block again (unless closed).
  void reset();
  // The group is going away: interrupts the current wait and every later one, for good.
  void close(const std::string& why);

 private:
  void wait(::gloo::transport::UnboundBuffer& buf, int peer, bool recv);
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

// The messages of one collective `seq` on a mesh, with byte counting.
class Wire {
 public:
  Wire(Mesh& mesh, Waits& waits, Counters& counters, uint64_t seq)
      : mesh_(mesh), waits_(waits), counters_(counters), seq_(seq) {}

  struct Message {
    std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
    int peer = -1;
    bool recv = false;
  };

  // Posts a send of `bytes` at `ptr` to island `to` (the memory stays untouched until
  // wait()); `raw` = fp32 bytes of data it carries (ByteCounters::raw_sent).
  Message send(int to, const void* ptr, size_t bytes, collectives::Tag tag, uint32_t index, uint64_t raw);
  // Posts a recv of at most `capacity` bytes from island `from` into `ptr`.
  Message recv(int from, void* ptr, size_t capacity, collectives::Tag tag, uint32_t index);
  // Waits for a send (or recv) to complete. A recv's payload size is counted by the caller
  // with received(), since only the payload says how long it was.
  void wait(Message& m);
  void received(uint64_t payload_bytes);

  uint64_t seq() const { return seq_; }
  int self() const { return mesh_.self(); }

 private:
  uint64_t slot(collectives::Tag tag, uint32_t index) const;

  Mesh& mesh_;
  Waits& waits_;
  Counters& counters_;
  const uint64_t seq_;
};

}  // namespace atl::transport::gloo_mesh
