// The data phase of one all-reduce attempt, once every participant has said HELLO and the
// weights are known: the schedule of transport/collectives/schedules.h (ring for lossless
// codecs, direct for lossy ones; bitwise the in-process and gloo results for the same
// inputs) run by ProgramExchange (program_exchange.cpp) over ZmqWire, on the I/O thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "compression/pipeline.h"
#include "transport/collectives/wire.h"
#include "transport/ring.h"
#include "transport/zmq/input_backup.h"
#include "transport/zmq/op.h"
#include "transport/zmq/transfer.h"

namespace atl::transport::dataplane {

struct ExchangeSetup {
  uint32_t group = 0;         // Header::group
  uint64_t seq = 0;
  uint64_t epoch = 0;
  std::vector<int> members;   // participants, ascending ids (= ring order)
  int pos = 0;                // this island's index in `members`
  at::Tensor buffer;          // [n] float32: the (weighted) contribution in, the mean out
  InputBackup* backup = nullptr;  // saves a region of `buffer` before its first write
  at::Tensor transmitted;     // optional [n]: this member's contribution as others decode it
  const compression::Pipeline* codec = nullptr;
  double divisor = 1;         // W for uniform weights, else the sum of the weights
  int64_t piece_elems = 1;    // ring: elements per wire message
  int64_t chunk_bytes = 1;    // direct: bytes per wire message
};

class Exchange {
 public:
  virtual ~Exchange() = default;
  // Sends what needs no input from others (and fills `transmitted` where it is known).
  virtual void start(OpContext& ctx) = 0;
  // A RING/DIRECT message of this attempt. Invalid ones are dropped via ctx.drops(); a
  // valid piece that fails to decode sets failure().
  virtual void on_message(OpContext& ctx, Inbound& m) = 0;
  virtual bool done() const = 0;
  // Peers this member still waits for (for ControlPlane::suspect on a timeout).
  virtual std::vector<int> waiting_on() const = 0;
  const Status& failure() const { return failure_; }
  uint64_t bytes_in() const { return bytes_in_; }
  // Bytes this member expects to receive (for the timeout), from n and the codec.
  static double expected_bytes(const ExchangeSetup& s);

 protected:
  Status failure_;
  uint64_t bytes_in_ = 0;
};

// The data phase of an all-reduce (the schedule the codec calls for).
std::unique_ptr<Exchange> make_exchange(ExchangeSetup setup);
// The data phase of an allgather among `members` (this island at `pos`), every member's
// byte count in `sizes`; fills `*out`.
std::unique_ptr<Exchange> make_gather_exchange(uint32_t group, uint64_t seq, uint64_t epoch,
                                               std::vector<int> members, int pos,
                                               const std::vector<uint8_t>* mine, std::vector<uint64_t> sizes,
                                               std::vector<std::vector<uint8_t>>* out, int64_t chunk_bytes);

// The collectives::Wire of one attempt of one collective on the data plane (see
// program_exchange.cpp). Used on the I/O thread: bind() the context of each call first.
class ZmqWire final : public collectives::Wire {
 public:
  // `members`: the attempt's participants (messages from others are dropped); `backup`
  // (may be null) saves buffer regions before the schedule writes them.
  ZmqWire(uint32_t group, uint64_t seq, uint64_t epoch, int64_t chunk_bytes, std::vector<int> members,
          InputBackup* backup);
  void bind(OpContext& ctx) { ctx_ = &ctx; }

  int self() const override { return ctx_->self(); }
  bool raw_fp32() const override { return true; }
  void send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
            bool raw) override;
  collectives::RecvId post_recv(int from, const collectives::MsgKey& key, uint8_t* dst, size_t capacity,
                                bool raw) override;
  bool ready(collectives::RecvId id) override;
  collectives::Payload take(collectives::RecvId id) override;
  bool sent() override { return true; }  // the links deliver what was queued
  void will_write(int64_t begin, int64_t end) override;

  // A data message of this attempt (type, sequence number and epoch already checked).
  void deliver(Inbound& m);
  // The peer whose message the schedule waits for (-1: none).
  int waiting_on() const { return waiting_on_; }
  uint64_t bytes_in() const { return bytes_in_; }

 private:
  // (sender, type, step, chunk, piece)
  using Key = std::tuple<int, uint8_t, uint32_t, uint32_t, uint32_t>;
  struct Slot {
    bool posted = false, raw = false, complete = false, split_frame = false;
    int from = -1;
    size_t capacity = 0;
    Inbound message;  // a whole message
    SplitIn split;    // or one frame in byte ranges
  };
  static constexpr size_t kMaxEarlyBytes = size_t{1} << 30;
  static Key key_of(int from, const collectives::MsgKey& k);
  void accept(Slot& s, Inbound& m);
  void release(Slot& s);

  OpContext* ctx_ = nullptr;
  const uint32_t group_;
  const uint64_t seq_, epoch_;
  const int64_t chunk_bytes_;
  const std::vector<int> members_;
  InputBackup* backup_;
  std::map<Key, Slot> slots_;
  std::vector<Key> posted_;  // by RecvId
  std::map<Key, std::vector<Inbound>> early_;  // arrived before their receive was posted
  size_t early_bytes_ = 0;
  collectives::RecvId last_taken_ = -1;
  int waiting_on_ = -1;
  uint64_t bytes_in_ = 0;
};

}  // namespace atl::transport::dataplane
