// Lossy all-reduce over the data plane ("direct" scheme). See exchange.h for the contract.
//
// Chunk c (ring::chunk_bounds(n, W, c)) is owned by members[c]. Phase 0: every member
// encodes each foreign chunk c once (seed direct_seed(seq, id, c, 0)) and sends the frame,
// split into wire pieces, to its owner. The owner decodes the W - 1 contributions, sums them
// in member order in fp32 with its own exact chunk in place, divides, encodes the mean once
// (direct_seed(seq, id, c, 1)) and sends it to everyone (phase 1), keeping
// decode(encode(mean)) itself so that all members end bitwise equal. Each member sends and
// receives about 2 (W - 1) / W of the encoded buffer, like a ring, with two quantisations
// of every value instead of W.
#include <ATen/ATen.h>

#include <algorithm>

#include "transport/ring.h"
#include "transport/zmq/exchange.h"
#include "transport/zmq/transfer.h"

namespace atl::transport::dataplane {

namespace {

class DirectExchange final : public Exchange {
 public:
  explicit DirectExchange(ExchangeSetup s) : s_(std::move(s)) {
    w_ = static_cast<int>(s_.members.size());
    in0_.resize(w_);
    in1_.resize(w_);
    decoded_.resize(w_);
    for (int q = 0; q < w_; ++q) {
      if (q == s_.pos) continue;
      in0_[q].reset(s_.codec->max_encoded_size(len(s_.pos)));
      in1_[q].reset(s_.codec->max_encoded_size(len(q)));
    }
  }

  void start(OpContext& ctx) override {
    const int r = s_.pos;
    for (int c = 0; c < w_; ++c) {
      at::Tensor src = chunk(s_.buffer, c);
      if (c == r) {  // the owner's own chunk never leaves it
        if (s_.transmitted.defined()) chunk(s_.transmitted, c).copy_(src);
        continue;
      }
      auto frame = ctx.frame_buffer();
      s_.codec->encode(src, *frame, direct_seed(s_.seq, s_.members[r], c, 0));
      if (s_.transmitted.defined()) {
        at::Tensor t = chunk(s_.transmitted, c);
        Status st = s_.codec->decode(frame->data(), frame->size(), t);
        TORCH_CHECK(st.is_ok(), "direct all-reduce: own encoding failed to decode: ", st.to_string());
      }
      send_split(ctx, {s_.members[c]}, header(ctx, 0, c), std::move(frame), s_.chunk_bytes,
                 static_cast<uint64_t>(src.numel()) * 4);
    }
  }

  void on_message(OpContext& ctx, Inbound& m) override {
    const Header& h = m.header;
    auto reject = [&](const std::string& why) {
      ctx.drops().drop("invalid direct piece", why + " (collective #" + std::to_string(s_.seq) +
                                                   " from island " + std::to_string(h.sender) + ")");
    };
    if (h.type != MsgType::kDirect) return reject("not a direct message");
    auto it = std::find(s_.members.begin(), s_.members.end(), h.sender);
    if (it == s_.members.end() || h.sender == ctx.self()) return reject("not from a participant");
    const int q = static_cast<int>(it - s_.members.begin());
    if (h.step == 0) {  // a contribution to the chunk this member owns
      if (h.chunk != static_cast<uint32_t>(s_.pos) || reduced_) return reject("not this member's chunk");
      Status st = in0_[q].accept(h, m.data());
      if (!st.is_ok()) return reject(st.message());
      bytes_in_ += kHeaderBytes + m.size();
      if (!in0_[q].complete()) return;
      decoded_[q] = at::empty({len(s_.pos)}, s_.buffer.options());
      if (!decode(in0_[q], decoded_[q], h.sender)) return;
      if (++got0_ == w_ - 1) reduce(ctx);
    } else if (h.step == 1) {  // the owner's mean of its chunk
      if (h.chunk != static_cast<uint32_t>(q)) return reject("a mean from a member that does not own the chunk");
      Status st = in1_[q].accept(h, m.data());
      if (!st.is_ok()) return reject(st.message());
      bytes_in_ += kHeaderBytes + m.size();
      if (!in1_[q].complete()) return;
      at::Tensor dst = chunk(s_.buffer, q);
      save(q);
      if (!decode(in1_[q], dst, h.sender)) return;
      ++got1_;
    } else {
      reject("phase out of range");
    }
  }

  bool done() const override { return reduced_ && got1_ == w_ - 1; }
  std::vector<int> waiting_on() const override {
    std::vector<int> out;
    for (int q = 0; q < w_; ++q) {
      if (q != s_.pos && (!in0_[q].complete() || !in1_[q].complete())) out.push_back(s_.members[q]);
    }
    return out;
  }

 private:
  int64_t len(int c) const {
    auto [b, e] = ring::chunk_bounds(s_.buffer.numel(), w_, c);
    return e - b;
  }
  void save(int c) {  // before chunk c of the buffer is overwritten (for a restart)
    auto [b, e] = ring::chunk_bounds(s_.buffer.numel(), w_, c);
    s_.backup->save(b, e);
  }
  at::Tensor chunk(const at::Tensor& t, int c) const {
    auto [b, e] = ring::chunk_bounds(s_.buffer.numel(), w_, c);
    return t.narrow(0, b, e - b);
  }
  Header header(OpContext& ctx, uint32_t phase, int c) const {
    Header h;
    h.type = MsgType::kDirect;
    h.sender = ctx.self();
    h.epoch = s_.epoch;
    h.seq = s_.seq;
    h.step = phase;
    h.chunk = static_cast<uint32_t>(c);
    return h;
  }
  bool decode(SplitIn& in, at::Tensor& out, int from) {
    Status st = s_.codec->decode(in.frame().data(), in.frame().size(), out);
    in.release();
    if (st.is_ok()) return true;
    failure_ = Status(StatusCode::kCorrupt, "direct frame from island " + std::to_string(from) +
                                                " did not decode: " + st.message());
    return false;
  }
  // The owner's fp32 sum in member order, divided, encoded once for everyone.
  void reduce(OpContext& ctx) {
    const int r = s_.pos;
    at::Tensor own = chunk(s_.buffer, r);
    at::Tensor sum = at::zeros({len(r)}, s_.buffer.options());
    for (int q = 0; q < w_; ++q) sum.add_(q == r ? own : decoded_[q]);
    sum.div_(s_.divisor);
    decoded_.assign(w_, at::Tensor());
    save(r);
    auto frame = ctx.frame_buffer();
    s_.codec->encode(sum, *frame, direct_seed(s_.seq, s_.members[r], r, 1));
    Status st = s_.codec->decode(frame->data(), frame->size(), own);  // what the others decode
    TORCH_CHECK(st.is_ok(), "direct all-reduce: own encoding failed to decode: ", st.to_string());
    std::vector<int> others;
    for (int q = 0; q < w_; ++q) {
      if (q != r) others.push_back(s_.members[q]);
    }
    send_split(ctx, others, header(ctx, 1, r), std::move(frame), s_.chunk_bytes,
               static_cast<uint64_t>(sum.numel()) * 4);
    reduced_ = true;
  }

  ExchangeSetup s_;
  int w_ = 0;
  std::vector<SplitIn> in0_, in1_;       // by member position: contributions / means
  std::vector<at::Tensor> decoded_;      // contributions to this member's chunk
  int got0_ = 0, got1_ = 0;
  bool reduced_ = false;
};

}  // namespace

std::unique_ptr<Exchange> make_direct_exchange(ExchangeSetup setup) {
  return std::make_unique<DirectExchange>(std::move(setup));
}

}  // namespace atl::transport::dataplane
