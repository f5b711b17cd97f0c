// Wire: what a collective's schedule (schedules.h) needs from a transport — post a message to
// a peer, post and await a message from a peer — for one collective on one member. The
// in-process hub, ZeroMQ's peer links and gloo's pairs each implement it, as thinly as they
// can (docs/collectives.md); the schedules never know which one they run on.
//
// Messages are matched by (peer, MsgKey) within one collective; a transport keeps the
// messages of different collectives apart (its sequence number and group id). Delivery is
// reliable and exactly once while the collective runs: a lost peer, a broken link or a
// corrupt message is the transport's business, reported by throwing from ready() or by
// abandoning the program.
//
// Lifetimes: the bytes passed to send() stay valid until the program has ended, and
// untouched until the program has received its next message (they are the caller's buffer,
// which later steps overwrite, or a frame held by the program): a wire that may have to
// resend them after that copies them. A receive's payload (take()) stays valid until the program posts
// or takes its next message.
//
// Thread model: used by the one thread that runs the program.
#pragma once

#include <algorithm>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace atl::transport::collectives {

// What a message is within a collective. Ids are frozen (they travel on the ZeroMQ wire).
enum class Tag : uint8_t {
  kHello = 1,       // rendezvous (attempt.h): what a member issued; the receive of a member's
                    // answer, whichever of kHello, kAbsent and kResultInfo it is
  kAbsent = 2,      // answer: "I never issue this collective" (joined later); no payload
  kRing = 3,        // ring all-reduce piece: step t, chunk, piece
  kDirect = 4,      // lossy all-reduce: step = phase (0 contribution, 1 mean), chunk
  kBroadcast = 5,   // broadcast piece from the root
  kResultInfo = 6,  // answer: the outcome of a finished collective (a hand-over follows)
  kResult = 7,      // hand-over piece: raw fp32 values of a finished collective
  kGather = 9,      // allgather: a member's bytes
};

// The receive a message matches: a rendezvous answer (kHello, kAbsent or kResultInfo) the
// one receive posted for that member's answer (tag kHello); any other message its own tag's.
inline Tag receive_tag(Tag t) { return t == Tag::kAbsent || t == Tag::kResultInfo ? Tag::kHello : t; }

struct MsgKey {
  Tag tag = Tag::kRing;
  uint32_t step = 0;
  uint32_t chunk = 0;
  uint32_t piece = 0;
  uint32_t pieces = 1;  // pieces of the transfer this one belongs to
};

// A received message's payload.
struct Payload {
  const uint8_t* data = nullptr;
  size_t size = 0;
  Tag tag = Tag::kRing;  // the tag it was sent with (differs from the receive's only for answers)
};

using RecvId = int;

class Wire {
 public:
  virtual ~Wire() = default;

  virtual int self() const = 0;
  // Whether an empty pipeline's (lossless fp32) data travels as raw little-endian fp32
  // without a compression frame around it. Wires that count frames (the simulator's) say no.
  virtual bool raw_fp32() const = 0;
  // Whether send() copies the bytes before it returns, so that the schedule may free an
  // encoded frame right after sending it instead of keeping it until the end (the
  // simulator's wire, which runs every member's program at once: kept frames would be about
  // two parameter-sized buffers per member at the same time).
  virtual bool copies_sends() const { return false; }

  // Posts `size` bytes at `data` to island `to`. `raw_bytes`: the fp32 bytes they stand for
  // (ByteCounters::raw_sent); `raw`: they are raw fp32 (raw_fp32()), not a frame.
  virtual void send(int to, const MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
                    bool raw) = 0;
  // Posts a receive from island `from`. `dst` (may be null): `capacity` bytes where the
  // payload may land directly (a wire that receives into memory it owns ignores it; one
  // that needs memory in advance, gloo's, requires it); `raw` as for send().
  virtual RecvId post_recv(int from, const MsgKey& key, uint8_t* dst, size_t capacity, bool raw) = 0;
  // Whether receive `id` has completed. A blocking wire waits here and returns true (or
  // throws); an event-driven one answers at once.
  virtual bool ready(RecvId id) = 0;
  // The completed receive's payload; counts its bytes as received.
  virtual Payload take(RecvId id) = 0;
  // Whether every posted send has left (a blocking wire waits here).
  virtual bool sent() = 0;
  // The payload of completed receive `id` (raw fp32) is final: elements [begin, end) of the
  // collective's result. A wire that keeps it and places it itself when the collective
  // completes (ZeroMQ: no copy into the result) returns true, and the payload then stays
  // valid until the program has ended; otherwise the schedule copies it.
  virtual bool keep(RecvId id, int64_t begin, int64_t end) { return false; }
  // The rendezvous is over and the data phase begins, expecting about `bytes` of payload
  // from the others (a wire that times out data phases starts its clock here).
  virtual void data_phase(double bytes) {}

  // For drivers of suspended programs: whether what the program waits for is there, so that
  // Program::resume() makes progress.
  bool can_resume() {
    if (awaiting_ == kAny) {
      return std::any_of(any_.begin(), any_.end(), [this](RecvId id) { return ready(id); });
    }
    if (awaiting_ == kNothing) return true;
    return awaiting_ == kAllSent ? sent() : ready(awaiting_);
  }

 private:
  friend struct receive;
  friend struct receive_any;
  friend struct all_sent;
  static constexpr RecvId kNothing = -1, kAllSent = -2, kAny = -3;
  RecvId awaiting_ = kNothing;  // what the suspended program waits for
  std::vector<RecvId> any_;     // kAny: these
};

// `co_await receive(wire, id)`: the payload of receive `id` once it has arrived.
struct receive {
  Wire& wire;
  RecvId id;
  bool await_ready() { return wire.ready(id); }
  void await_suspend(std::coroutine_handle<>) { wire.awaiting_ = id; }
  Payload await_resume() {
    wire.awaiting_ = Wire::kNothing;
    return wire.take(id);
  }
};

// `co_await receive_any(wire, ids)`: the index in `ids` of a receive that has arrived (the
// first in `ids` order among those that have; a blocking wire waits for ids[0]). Take its
// payload with Wire::take.
struct receive_any {
  Wire& wire;
  const std::vector<RecvId>& ids;
  size_t found = 0;
  bool await_ready() {
    for (found = 0; found < ids.size(); ++found) {
      if (wire.ready(ids[found])) return true;
    }
    return false;
  }
  void await_suspend(std::coroutine_handle<>) {
    wire.awaiting_ = Wire::kAny;
    wire.any_ = ids;
  }
  size_t await_resume() {
    wire.awaiting_ = Wire::kNothing;
    if (found == ids.size()) await_ready();
    return found;
  }
};

// `co_await all_sent(wire)`: every send posted so far has left.
struct all_sent {
  Wire& wire;
  bool await_ready() { return wire.sent(); }
  void await_suspend(std::coroutine_handle<>) { wire.awaiting_ = Wire::kAllSent; }
  void await_resume() { wire.awaiting_ = Wire::kNothing; }
};

// `co_await pending(wire)`: what a nested program waits for. A program runs another one
// (the data phase inside an attempt) as
//   for (Program inner = ...; !inner.resume();) co_await pending{wire};
// the inner program's await has told the wire what it waits for.
struct pending {
  Wire& wire;
  bool await_ready() { return wire.can_resume(); }
  void await_suspend(std::coroutine_handle<>) {}
  void await_resume() {}
};

}  // namespace atl::transport::collectives
