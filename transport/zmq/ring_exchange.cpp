// Ring all-reduce over the data plane, piece by piece. See exchange.h for the contract and
// transport/ring.h for the schedule.
//
// Member r (position in the ring) runs T = 2 (W - 1) steps. At step t it sends chunk
// send_chunk(t) to next = r + 1 and receives chunk recv_chunk(t) from prev = r - 1, where
// recv_chunk(t) == send_chunk(t + 1): what arrives at step t is what leaves at step t + 1.
// Each chunk travels as piece frames (transfer.h) of the agreed piece length, so piece k of
// step t + 1 can leave once piece k of step t has been added (reduce-scatter) or copied
// (all-gather). Every element still sees exactly the additions of the in-process ring, in
// the same order, and the owner's division happens after its last addition.
#include <ATen/ATen.h>

#include "transport/ring.h"
#include "transport/zmq/exchange.h"
#include "transport/zmq/transfer.h"

namespace atl::transport::dataplane {

double Exchange::expected_bytes(const ExchangeSetup& s) {
  const double w = static_cast<double>(s.members.size());
  const double n = static_cast<double>(s.buffer.numel());
  const double frame = static_cast<double>(s.codec->max_encoded_size(s.buffer.numel()));
  // Both schedules receive about 2 (W - 1) / W of the encoded buffer, plus headers.
  return 2.0 * (w - 1) / w * frame + 2.0 * (w - 1) * (n * 4 / static_cast<double>(s.chunk_bytes) + 1) *
                                         static_cast<double>(kHeaderBytes);
}

namespace {

class RingExchange final : public Exchange {
 public:
  explicit RingExchange(ExchangeSetup s) : s_(std::move(s)) {
    w_ = static_cast<int>(s_.members.size());
    steps_ = 2 * (w_ - 1);
    next_ = s_.members[(s_.pos + 1) % w_];
    prev_ = s_.members[(s_.pos + w_ - 1) % w_];
    received_.resize(steps_);
    for (int t = 0; t < steps_; ++t) {
      received_[t].assign(pieces_of(recv_chunk(t)), false);
      to_receive_ += static_cast<int64_t>(received_[t].size());
    }
    scratch_ = at::empty({s_.piece_elems}, s_.buffer.options());
  }

  void start(OpContext& ctx) override {
    if (s_.transmitted.defined()) s_.transmitted.copy_(s_.buffer);
    for (uint32_t k = 0; k < pieces_of(send_chunk(0)); ++k) send(ctx, 0, k);
  }

  void on_message(OpContext& ctx, Inbound& m) override {
    const Header& h = m.header;
    auto reject = [&](const std::string& why) {
      ctx.drops().drop("invalid ring piece", why + " (collective #" + std::to_string(s_.seq) +
                                                 " from island " + std::to_string(h.sender) + ")");
    };
    if (h.type != MsgType::kRing) return reject("not a ring message");
    if (h.sender != prev_) return reject("not from the ring predecessor");
    if (h.step >= static_cast<uint32_t>(steps_)) return reject("step out of range");
    const int t = static_cast<int>(h.step);
    const int chunk = recv_chunk(t);
    if (h.chunk != static_cast<uint32_t>(chunk)) return reject("wrong chunk for the step");
    auto [cb, ce] = ring::chunk_bounds(s_.buffer.numel(), w_, chunk);
    const uint32_t pieces = static_cast<uint32_t>(received_[t].size());
    if (h.flags != (raw_pieces(*s_.codec) ? kFlagRaw : 0) || h.pieces != pieces || h.piece >= pieces ||
        received_[t][h.piece] ||
        h.total != static_cast<uint64_t>(ce - cb)) {
      return reject("piece geometry disagrees");
    }
    auto [pb, pe] = ring::chunk_bounds(ce - cb, static_cast<int>(pieces), static_cast<int>(h.piece));
    if (h.offset != static_cast<uint64_t>(pb)) return reject("piece offset disagrees");
    at::Tensor dst = s_.buffer.narrow(0, cb + pb, pe - pb);
    s_.backup->save(cb + pb, cb + pe);  // for a restart: this piece is about to change
    Status st;
    if (t < w_ - 1) {  // reduce-scatter: own chunk += incoming (raw pieces: read in place)
      StatusOr<at::Tensor> incoming = piece_values(*s_.codec, m, pe - pb, scratch_);
      st = incoming.is_ok() ? Status::ok() : incoming.status();
      if (st.is_ok()) {
        dst.add_(*incoming);
        if (t == w_ - 2) dst.div_(s_.divisor);  // this member owns the chunk's sum now
      }
    } else {  // all-gather: copy
      st = decode_piece(*s_.codec, m, dst);
    }
    if (!st.is_ok()) {
      failure_ = Status(StatusCode::kCorrupt, "ring piece from island " + std::to_string(h.sender) +
                                                  " did not decode: " + st.message());
      return;
    }
    bytes_in_ += kHeaderBytes + m.size();
    received_[t][h.piece] = true;
    ++got_;
    if (t + 1 < steps_) send(ctx, t + 1, h.piece);
  }

  bool done() const override { return got_ == to_receive_; }
  std::vector<int> waiting_on() const override {
    if (done()) return {};
    return {prev_};
  }

 private:
  int send_chunk(int t) const {
    return t < w_ - 1 ? ring::reduce_scatter_chunk(s_.pos, t, w_)
                      : ring::all_gather_chunk(s_.pos, t - (w_ - 1), w_);
  }
  int recv_chunk(int t) const {
    const int p = (s_.pos + w_ - 1) % w_;
    return t < w_ - 1 ? ring::reduce_scatter_chunk(p, t, w_) : ring::all_gather_chunk(p, t - (w_ - 1), w_);
  }
  uint32_t pieces_of(int chunk) const {
    auto [b, e] = ring::chunk_bounds(s_.buffer.numel(), w_, chunk);
    return piece_count(e - b, s_.piece_elems);
  }
  void send(OpContext& ctx, int t, uint32_t piece) {
    const int chunk = send_chunk(t);
    auto [b, e] = ring::chunk_bounds(s_.buffer.numel(), w_, chunk);
    Header h;
    h.type = MsgType::kRing;
    h.sender = ctx.self();
    h.epoch = s_.epoch;
    h.seq = s_.seq;
    h.step = static_cast<uint32_t>(t);
    h.chunk = static_cast<uint32_t>(chunk);
    send_piece(ctx, next_, h, s_.buffer.narrow(0, b, e - b), piece, pieces_of(chunk), *s_.codec, 0);
  }

  ExchangeSetup s_;
  int w_ = 0, steps_ = 0, next_ = -1, prev_ = -1;
  std::vector<std::vector<bool>> received_;  // [step][piece]
  int64_t to_receive_ = 0, got_ = 0;
  at::Tensor scratch_;                        // [piece_elems] decode target of one piece
};

}  // namespace

std::unique_ptr<Exchange> make_ring_exchange(ExchangeSetup setup) {
  return std::make_unique<RingExchange>(std::move(setup));
}

}  // namespace atl::transport::dataplane
