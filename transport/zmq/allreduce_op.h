// One allreduce_mean over the data plane: rendezvous, data phase, restarts and the hand-over
// of a finished result to peers that restarted.
//
// Attempt. An attempt runs among the members of one membership epoch. It opens with HELLO
// (weight, element count, codec fingerprint, ring piece length) to every member; a member
// that will never issue this sequence number (it joined later: seq < its first_seq) answers
// ABSENT and sits the attempt out. Once every member has answered, the participants (those
// that said HELLO) are known to all alike; they must agree on size, codec and piece length
// (else the collective completes with kInternal). Then the data phase (exchange.h) runs on
// the caller's buffer: restored where an earlier attempt wrote it (InputBackup keeps the
// input, saved region by region before the first write), pre-multiplied by the weight when
// the weights differ, then the ring (lossless) or direct (lossy) schedule.
// Messages of a newer epoch are kept until this op reaches that epoch; older ones are
// dropped as stale. Data that arrives before the local HELLO set is complete is kept too.
//
// Restart. When the membership moves to a new epoch, an unfinished op starts a new attempt
// in it from the original input (all members derive the same member set from the epoch, so
// they agree). An island that finds itself outside the membership completes with
// kMembershipChanged and its own input. A data phase that exceeds its timeout
// (slack * (latency + bytes / bandwidth) + 1 s, doubled after each expiry) reports the peers
// it still waits for to ControlPlane::suspect; the coordinator decides, and its new epoch
// restarts the op among the survivors. Lost messages on a live link are the link's business
// (peer_links.h retransmits).
//
// Hand-over. A member that finished keeps a copy of the result (Retained; ZmqGroup serves
// it). When a peer restarts a finished collective (its HELLO arrives after completion), the
// finished member answers RESULT_INFO + RESULT pieces instead of HELLO; the restarting peer,
// still in its rendezvous, adopts that result and its contributors. So every member that
// completes a given collective holds bitwise the same values and contributors.
//
// Result: contributors = the participants of the attempt that produced the values;
// status ok, or kPeerLost when a member of the first attempt is not among them.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <vector>

#include "compression/pipeline.h"
#include "transport/zmq/exchange.h"
#include "transport/zmq/input_backup.h"
#include "transport/zmq/op.h"
#include "transport/zmq/transfer.h"

namespace atl::transport::dataplane {

class AllreduceOp final : public Op {
 public:
  // Runs on the island thread. `input` ([n] float32, contents unspecified) receives the input
  // as the data phase overwrites it (for restarts), then the retained result; the codec is
  // copied.
  AllreduceOp(uint64_t seq, at::Tensor buffer, at::Tensor input, const compression::Pipeline& codec,
              double weight, at::Tensor transmitted, int64_t chunk_bytes,
              std::shared_ptr<Completion> completion);
  // An allgather of `bytes` into `*out` (Group::allgather), with the same attempts, restarts
  // and hand-over: HELLO carries the byte count (kind kHelloAllgather), the data phase is
  // collectives::allgather, and a finished result is kept and handed over packed as fp32
  // words (pack_gathered).
  AllreduceOp(uint64_t seq, std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out,
              int64_t chunk_bytes, std::shared_ptr<Completion> completion);

  void start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_message(OpContext& ctx, Inbound& m) override;
  void on_timer(OpContext& ctx, Clock::time_point now) override;
  Clock::time_point next_timer() const override { return deadline_; }
  std::unique_ptr<Retained> take_retained() override { return std::move(retained_); }

 private:
  void attempt(OpContext& ctx, uint64_t epoch, const std::vector<int>& members);
  void maybe_begin_data(OpContext& ctx);
  void begin_data(OpContext& ctx, const std::vector<int>& participants);
  // Runs `exchange` (the data phase) with a timeout for `expected_bytes`, and feeds it the
  // messages that came early.
  void start_exchange(OpContext& ctx, std::unique_ptr<Exchange> exchange, double expected_bytes);
  void on_adoption(OpContext& ctx, Inbound& m);
  void complete(OpContext& ctx, Status status, std::vector<int> contributors, double weight_sum);

  bool gather_ = false;            // an allgather (else an all-reduce)
  std::vector<uint8_t> gather_in_;
  std::vector<std::vector<uint8_t>>* gather_out_ = nullptr;
  at::Tensor adopt_buffer_;        // allgather: a finished peer's packed result

  // The caller's request.
  at::Tensor buffer_, transmitted_;
  at::Tensor input_;               // the saved input (backup_), then the retained result
  std::optional<InputBackup> backup_;  // until completion
  compression::Pipeline codec_;
  double weight_;
  int64_t chunk_bytes_;
  HelloBody hello_;                // what this member announces
  std::vector<int> first_members_; // members of the first attempt

  // The current attempt.
  uint64_t epoch_ = 0;
  std::vector<int> members_;
  std::map<int, std::optional<HelloBody>> answers_;  // HELLO, or nullopt for ABSENT
  std::vector<Inbound> early_;      // data of this epoch before the data phase began
  std::vector<Inbound> future_;     // messages of newer epochs
  std::unique_ptr<Exchange> exchange_;
  std::vector<int> participants_;
  double weight_sum_ = 0;
  Clock::time_point data_start_{}, deadline_ = Clock::time_point::max();
  Clock::duration timeout_{};

  // Adopting a finished peer's result.
  int adopt_from_ = -1;
  ResultInfoBody adopt_info_;
  PiecesIn adopt_pieces_;

  std::unique_ptr<Retained> retained_;
};

// An allgather's result as fp32 words (count u64, sizes u64 x count, the bytes, zero-padded
// to a multiple of 4) for the hand-over, and back. unpack_gathered: kCorrupt when the words
// do not hold such a layout.
at::Tensor pack_gathered(const std::vector<std::vector<uint8_t>>& gathered);
Status unpack_gathered(const at::Tensor& words, std::vector<std::vector<uint8_t>>* gathered);

// Sends a finished all-reduce's outcome to `peer` (RESULT_INFO, then fp32 RESULT pieces).
void serve_result(OpContext& ctx, uint64_t seq, uint64_t epoch, const Retained& r, int peer, uint32_t group = 0);

}  // namespace atl::transport::dataplane
