// ZmqWire: the collectives::Wire of one attempt of one collective over the ZeroMQ data plane
// (zmq_wire.cpp), on which AllreduceOp runs collectives::attempt (rendezvous, hand-over,
// data phase) for every collective.
//
// Thread model: the I/O thread; bind() the context of each call first.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "transport/collectives/wire.h"
#include "transport/zmq/op.h"

namespace atl::transport::dataplane {

class ZmqWire final : public collectives::Wire {
 public:
  // `members`: the attempt's members (messages from others are dropped). `result` (may be
  // undefined): the all-reduce's result tensor, which the schedule writes before it sends
  // from it and never writes again: raw pieces from it are sent without a copy.
  ZmqWire(uint32_t group, uint64_t seq, uint64_t epoch, int64_t chunk_bytes, std::vector<int> members,
          at::Tensor result = {});
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
  bool keep(collectives::RecvId id, int64_t begin, int64_t end) override;
  void data_phase(double bytes) override;

  // A message of this attempt (sequence number and epoch already checked).
  void deliver(Inbound& m);
  // Whether the data phase has begun, and the payload bytes it expects plus their headers.
  bool in_data_phase() const { return data_phase_; }
  double expected_bytes() const { return expected_bytes_; }
  // The peer whose message the schedule waits for (-1: none).
  int waiting_on() const { return waiting_on_; }
  uint64_t bytes_in() const { return bytes_in_; }
  // The payloads keep() kept: the fp32 values of the result's elements from `first` on.
  std::vector<KeptPiece> take_kept() { return std::move(kept_); }

 private:
  // (sender, type, step, chunk, piece)
  using Key = std::tuple<int, uint8_t, uint32_t, uint32_t, uint32_t>;
  // What keeps `size` bytes at `data` alive unchanged, when they are the result tensor's or
  // a kept piece's (null: anything else, which is copied).
  std::shared_ptr<const void> owner_of(const uint8_t* data, size_t size) const;
  struct Slot {  // a posted receive
    bool raw = false, complete = false, split_frame = false;
    size_t capacity = 0;
    Inbound message;  // a whole message
    // or one frame in byte ranges (kFlagSplit), reassembled here
    uint32_t pieces = 0, received = 0;
    std::vector<bool> seen;
    Bytes frame;
  };
  static constexpr size_t kMaxEarlyBytes = size_t{1} << 30;
  static constexpr size_t kMinKeptBytes = 4096;  // smaller pieces are copied
  static Key key_of(int from, const collectives::MsgKey& k);
  // One frame, in byte ranges of at most chunk_bytes, to `to`. `raw_bytes`: the fp32 size
  // the frame stands for.
  void send_split(int to, Header h, const uint8_t* data, size_t size, uint64_t raw_bytes);
  void accept(Slot& s, Inbound& m);
  void release(Slot& s);
  void drop(const Header& h, const std::string& why);

  OpContext* ctx_ = nullptr;
  const uint32_t group_;
  const uint64_t seq_, epoch_;
  const int64_t chunk_bytes_;
  const std::vector<int> members_;
  std::map<Key, Slot> slots_;
  std::vector<Key> posted_;  // by RecvId
  std::map<Key, std::vector<Inbound>> early_;  // arrived before their receive was posted
  size_t early_bytes_ = 0;
  collectives::RecvId last_taken_ = -1;
  int waiting_on_ = -1;
  uint64_t bytes_in_ = 0;
  bool data_phase_ = false;
  double expected_bytes_ = 0;
  std::vector<KeptPiece> kept_;
  std::shared_ptr<const at::Tensor> result_;  // null without a result tensor
};

}  // namespace atl::transport::dataplane
