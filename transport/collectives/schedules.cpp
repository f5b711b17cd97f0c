#include "transport/collectives/schedules.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "src/base/hash.h"
#include "transport/ring.h"

namespace atl::transport::collectives {

namespace {

// dst = (a + b) / divisor in one pass over [n] float32 (contiguous, CPU), rounded as
// at::add_out then div_ round it (the float sum, then the quotient by the divisor as a float):
// bitwise the same, without reading and writing dst twice.
void add_divide(at::Tensor& dst, const at::Tensor& a, const at::Tensor& b, double divisor) {
  const auto plain = [](const at::Tensor& t) {
    return t.is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
  };
  if (!plain(dst) || !plain(a) || !plain(b)) {
    at::add_out(dst, a, b);
    dst.div_(divisor);
    return;
  }
  float* out = dst.data_ptr<float>();
  const float* x = a.data_ptr<float>();
  const float* y = b.data_ptr<float>();
  const auto d = static_cast<float>(divisor);
  const int64_t n = dst.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] + y[i]) / d;
}

using Bytes = std::vector<uint8_t>;

int64_t chunk_len(int64_t n, int w, int c) {
  auto [b, e] = ring::chunk_bounds(n, w, c);
  return e - b;
}

at::Tensor chunk(const at::Tensor& t, int w, int c) {
  auto [b, e] = ring::chunk_bounds(t.numel(), w, c);
  return t.narrow(0, b, e - b);
}

// Decodes a peer's frame into `out` ([len] float32). Throws CorruptFrame.
void decode_from(const compression::Pipeline& codec, const Payload& p, at::Tensor out, int from, const char* what) {
  Status st = codec.decode(p.data, p.size, out);
  if (!st.is_ok()) {
    throw CorruptFrame(std::string(what) + ": a frame from island " + std::to_string(from) +
                       " did not decode: " + st.to_string());
  }
}

// Decodes this member's own encoding (what the others will decode) into `out`.
void decode_own(const compression::Pipeline& codec, const Bytes& frame, at::Tensor out) {
  Status st = codec.decode(frame.data(), frame.size(), out);
  TORCH_CHECK(st.is_ok(), "collective: own encoding failed to decode: ", st.to_string());
}

Bytes encode(const compression::Pipeline& codec, const at::Tensor& src, uint64_t seed) {
  Bytes out;
  codec.encode(src, out, seed);
  return out;
}

const uint8_t* bytes_of(const at::Tensor& t) { return static_cast<const uint8_t*>(t.data_ptr()); }
uint8_t* mutable_bytes_of(const at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }
uint64_t fp32_bytes(int64_t n) { return static_cast<uint64_t>(n) * sizeof(float); }

// ceil(n / per) pieces of at most `per` elements (no overflow for per = INT64_MAX).
int64_t pieces_of(int64_t n, int64_t per) {
  per = std::max<int64_t>(1, per);
  return n / per + (n % per != 0);
}

// The fp32 values of a raw payload, as a tensor over the wire's memory (no copy).
at::Tensor raw_view(const Payload& p, int64_t n, int from, const char* what) {
  if (p.size != fp32_bytes(n)) {
    throw CorruptFrame(std::string(what) + ": a raw piece of " + std::to_string(p.size) + " bytes from island " +
                       std::to_string(from) + ", expected " + std::to_string(fp32_bytes(n)));
  }
  if (n == 0) return at::empty({0}, at::kFloat);
  at::Tensor view = at::from_blob(const_cast<uint8_t*>(p.data), {n}, at::kFloat);
  // A payload at an odd address is copied once rather than read unaligned by the kernels.
  return reinterpret_cast<uintptr_t>(p.data) % alignof(float) == 0 ? view : view.clone();
}

Program ring_allreduce(Wire& wire, AllreduceSetup s) {
  const int w = static_cast<int>(s.members.size());
  const int steps = 2 * (w - 1);
  const int r = s.pos;
  const int next = s.members[(r + 1) % w], prev = s.members[(r + w - 1) % w];
  const int64_t n = s.buffer.numel();
  const compression::Pipeline& codec = *s.codec;
  const bool raw = wire.raw_fp32() && codec.stages().empty();

  auto send_chunk = [&](int t) {
    return t < w - 1 ? ring::reduce_scatter_chunk(r, t, w) : ring::all_gather_chunk(r, t - (w - 1), w);
  };
  auto recv_chunk = [&](int t) { return send_chunk(t + 1); };  // what arrives at t leaves at t + 1
  // An empty chunk still travels as one (empty) frame; raw, it does not travel at all.
  auto pieces = [&](int c) {
    const int64_t len = chunk_len(n, w, c);
    if (len == 0) return raw ? 0 : 1;
    return static_cast<int>(pieces_of(len, s.piece_elems));
  };
  auto key = [&](int t, int c, int k) {
    return MsgKey{Tag::kRing, static_cast<uint32_t>(t), static_cast<uint32_t>(c), static_cast<uint32_t>(k),
                  static_cast<uint32_t>(pieces(c))};
  };
  const int64_t max_chunk = chunk_len(n, w, 0);
  // Step 0 sends the input; every later step a chunk written to `res` the step before.
  const at::Tensor res = s.out.defined() ? s.out : s.buffer;

  // Reduce-scatter input lands in scratch, by step parity: step t + 1's receives are posted
  // while step t is consumed. All-gather input lands in place.
  at::Tensor scratch = at::empty({2 * max_chunk}, s.buffer.options());
  std::vector<std::vector<RecvId>> recvs(static_cast<size_t>(steps));
  std::vector<std::vector<Bytes>> frames(static_cast<size_t>(steps));  // encoded sends, kept until the end

  auto post_recvs = [&](int t) {
    const int c = recv_chunk(t);
    const int64_t len = chunk_len(n, w, c);
    const int p = pieces(c);
    const int64_t cb = ring::chunk_bounds(n, w, c).first;
    for (int k = 0; k < p; ++k) {
      auto [pb, pe] = ring::chunk_bounds(len, p, k);
      if (raw) {
        at::Tensor dst = t < w - 1 ? scratch.narrow(0, (t % 2) * max_chunk + pb, pe - pb)
                                   : res.narrow(0, cb + pb, pe - pb);
        recvs[t].push_back(wire.post_recv(prev, key(t, c, k), mutable_bytes_of(dst), fp32_bytes(pe - pb), true));
      } else {
        recvs[t].push_back(wire.post_recv(prev, key(t, c, k), nullptr, codec.max_encoded_size(pe - pb), false));
      }
    }
  };
  // `kept`: the piece's values are those of a payload the wire keeps (it forwards them).
  auto send_piece = [&](int t, int k, const uint8_t* kept = nullptr) {
    const int c = send_chunk(t);
    const int64_t len = chunk_len(n, w, c);
    const int64_t cb = ring::chunk_bounds(n, w, c).first;
    auto [pb, pe] = ring::chunk_bounds(len, pieces(c), k);
    at::Tensor src = (t == 0 ? s.buffer : res).narrow(0, cb + pb, pe - pb);
    if (raw) {
      wire.send(next, key(t, c, k), kept ? kept : bytes_of(src), fp32_bytes(pe - pb), fp32_bytes(pe - pb), true);
    } else {
      frames[t].push_back(encode(codec, src, 0));
      const Bytes& f = frames[t].back();
      wire.send(next, key(t, c, k), f.data(), f.size(), fp32_bytes(pe - pb), false);
      if (wire.copies_sends()) frames[t].pop_back();
    }
  };

  if (s.transmitted.defined()) s.transmitted.copy_(s.buffer);
  if (steps > 0) {
    post_recvs(0);
    for (int k = 0; k < pieces(send_chunk(0)); ++k) send_piece(0, k);
  }
  for (int t = 0; t < steps; ++t) {
    if (t + 1 < steps) post_recvs(t + 1);
    const int c = recv_chunk(t);
    const int64_t len = chunk_len(n, w, c);
    const int64_t cb = ring::chunk_bounds(n, w, c).first;
    const int p = pieces(c);
    for (int k = 0; k < p; ++k) {
      auto [pb, pe] = ring::chunk_bounds(len, p, k);
      at::Tensor dst = res.narrow(0, cb + pb, pe - pb);
      const Payload in = co_await receive{wire, recvs[t][k]};
      const uint8_t* kept = nullptr;
      if (t < w - 1) {  // reduce-scatter: own chunk + incoming
        at::Tensor incoming;
        if (raw) {
          incoming = raw_view(in, pe - pb, prev, "ring all-reduce");
        } else {
          incoming = scratch.narrow(0, (t % 2) * max_chunk + pb, pe - pb);
          decode_from(codec, in, incoming, prev, "ring all-reduce");
        }
        if (t == w - 2) {  // this member owns the chunk's sum now: the mean in the same pass
          add_divide(dst, s.buffer.narrow(0, cb + pb, pe - pb), incoming, s.divisor);
        } else {
          at::add_out(dst, s.buffer.narrow(0, cb + pb, pe - pb), incoming);
        }
      } else if (raw) {  // all-gather: the piece landed in place, is kept by the wire, or is copied there
        at::Tensor incoming = raw_view(in, pe - pb, prev, "ring all-reduce");
        if (in.data == bytes_of(dst)) {
        } else if (wire.keep(recvs[t][k], cb + pb, cb + pe)) {
          kept = in.data;
        } else {
          dst.copy_(incoming);
        }
      } else {
        decode_from(codec, in, dst, prev, "ring all-reduce");
      }
      if (t + 1 < steps) send_piece(t + 1, k, kept);
    }
  }
  co_await all_sent{wire};
}

Program direct_allreduce(Wire& wire, AllreduceSetup s) {
  const int w = static_cast<int>(s.members.size());
  const int r = s.pos;
  const int64_t n = s.buffer.numel();
  const compression::Pipeline& codec = *s.codec;
  const at::Tensor res = s.out.defined() ? s.out : s.buffer;
  std::vector<Bytes> out0(static_cast<size_t>(w));
  std::vector<RecvId> recv0(static_cast<size_t>(w), -1), recv1(static_cast<size_t>(w), -1);
  for (int q = 0; q < w; ++q) {
    if (q == r) continue;
    recv0[q] = wire.post_recv(s.members[q], {Tag::kDirect, 0, static_cast<uint32_t>(r)}, nullptr,
                              codec.max_encoded_size(chunk_len(n, w, r)), false);
    recv1[q] = wire.post_recv(s.members[q], {Tag::kDirect, 1, static_cast<uint32_t>(q)}, nullptr,
                              codec.max_encoded_size(chunk_len(n, w, q)), false);
  }
  for (int c = 0; c < w; ++c) {  // phase 0: each foreign chunk, encoded once, to its owner
    at::Tensor src = chunk(s.buffer, w, c);
    if (c == r) {  // the owner's own chunk never leaves it
      if (s.transmitted.defined()) chunk(s.transmitted, w, c).copy_(src);
      continue;
    }
    out0[c] = encode(codec, src, ring::direct_seed(s.seq, s.members[r], c, 0));
    if (s.transmitted.defined()) decode_own(codec, out0[c], chunk(s.transmitted, w, c));
    wire.send(s.members[c], {Tag::kDirect, 0, static_cast<uint32_t>(c)}, out0[c].data(), out0[c].size(),
              fp32_bytes(src.numel()), false);
    if (wire.copies_sends()) out0[c] = Bytes();
  }
  // The owner's fp32 sum in member order, divided, encoded once for everyone.
  at::Tensor own = chunk(s.buffer, w, r);
  at::Tensor sum = at::zeros({own.numel()}, s.buffer.options());
  at::Tensor decoded = at::empty({own.numel()}, s.buffer.options());
  for (int q = 0; q < w; ++q) {
    if (q == r) {
      sum.add_(own);
      continue;
    }
    const Payload in = co_await receive{wire, recv0[q]};
    decode_from(codec, in, decoded, s.members[q], "direct all-reduce");
    sum.add_(decoded);
  }
  sum.div_(s.divisor);
  const Bytes mean = encode(codec, sum, ring::direct_seed(s.seq, s.members[r], r, 1));
  decode_own(codec, mean, chunk(res, w, r));  // what the others decode
  for (int q = 0; q < w; ++q) {
    if (q != r) {
      wire.send(s.members[q], {Tag::kDirect, 1, static_cast<uint32_t>(r)}, mean.data(), mean.size(),
                fp32_bytes(sum.numel()), false);
    }
  }
  for (int q = 0; q < w; ++q) {  // phase 1: every owner's mean
    if (q == r) continue;
    const Payload in = co_await receive{wire, recv1[q]};
    decode_from(codec, in, chunk(res, w, q), s.members[q], "direct all-reduce");
  }
  co_await all_sent{wire};
}

}  // namespace

uint64_t codec_fingerprint(const compression::Pipeline& codec) {
  Bytes frame;
  codec.encode(at::empty({0}, at::kFloat), frame, 0);
  return xxh3_64(frame.data(), frame.size());
}

double expected_bytes(const AllreduceSetup& s) {
  const double w = static_cast<double>(s.members.size());
  return 2.0 * (w - 1) / w * static_cast<double>(s.codec->max_encoded_size(s.buffer.numel()));
}

Program allreduce(Wire& wire, AllreduceSetup s) {
  return s.codec->lossless() ? ring_allreduce(wire, std::move(s)) : direct_allreduce(wire, std::move(s));
}

Program broadcast(Wire& wire, BroadcastSetup s) {
  const compression::Pipeline& codec = *s.codec;
  const bool raw = wire.raw_fp32() && codec.stages().empty();
  const int64_t n = s.buffer.numel();
  // Lossless: pieces (an empty buffer still travels as one piece); lossy: one frame.
  const int pieces = codec.lossless() ? static_cast<int>(std::max<int64_t>(1, pieces_of(n, s.piece_elems))) : 1;
  auto key = [&](int k) {
    return MsgKey{s.tag, 0, 0, static_cast<uint32_t>(k), static_cast<uint32_t>(pieces)};
  };
  if (wire.self() == s.root) {
    std::vector<Bytes> frames(static_cast<size_t>(pieces));
    for (int k = 0; k < pieces; ++k) {
      auto [pb, pe] = ring::chunk_bounds(n, pieces, k);
      at::Tensor src = s.buffer.narrow(0, pb, pe - pb);
      if (!raw) frames[k] = encode(codec, src, 0);
      const uint8_t* data = raw ? bytes_of(src) : frames[k].data();
      const size_t size = raw ? fp32_bytes(pe - pb) : frames[k].size();
      for (int q : s.members) {
        if (q != s.root) wire.send(q, key(k), data, size, fp32_bytes(pe - pb), raw);
      }
    }
    co_await all_sent{wire};
    co_return;
  }
  std::vector<RecvId> recvs;
  for (int k = 0; k < pieces; ++k) {
    auto [pb, pe] = ring::chunk_bounds(n, pieces, k);
    at::Tensor dst = s.buffer.narrow(0, pb, pe - pb);
    recvs.push_back(raw ? wire.post_recv(s.root, key(k), mutable_bytes_of(dst), fp32_bytes(pe - pb), true)
                        : wire.post_recv(s.root, key(k), nullptr, codec.max_encoded_size(pe - pb), false));
  }
  for (int k = 0; k < pieces; ++k) {
    auto [pb, pe] = ring::chunk_bounds(n, pieces, k);
    at::Tensor dst = s.buffer.narrow(0, pb, pe - pb);
    const Payload in = co_await receive{wire, recvs[k]};
    if (raw) {
      at::Tensor incoming = raw_view(in, pe - pb, s.root, "broadcast");
      if (in.data != bytes_of(dst)) dst.copy_(incoming);
    } else {
      decode_from(codec, in, dst, s.root, "broadcast");
    }
  }
}

Program allgather(Wire& wire, AllgatherSetup s) {
  const int w = static_cast<int>(s.members.size());
  const int r = s.pos;
  std::vector<std::vector<uint8_t>>& out = *s.out;
  out.assign(static_cast<size_t>(w), {});
  std::vector<RecvId> recvs(static_cast<size_t>(w), -1);
  const MsgKey key{Tag::kGather};
  for (int q = 0; q < w; ++q) {
    if (q == r) continue;
    out[q].resize(s.sizes[q]);
    recvs[q] = wire.post_recv(s.members[q], key, out[q].data(), out[q].size(), false);
  }
  for (int q = 0; q < w; ++q) {
    if (q != r) wire.send(s.members[q], key, s.mine->data(), s.mine->size(), 0, false);
  }
  out[r] = *s.mine;
  for (int q = 0; q < w; ++q) {
    if (q == r) continue;
    const Payload in = co_await receive{wire, recvs[q]};
    if (in.size != s.sizes[q]) {
      throw CorruptFrame("allgather: " + std::to_string(in.size) + " bytes from island " +
                         std::to_string(s.members[q]) + ", announced " + std::to_string(s.sizes[q]));
    }
    if (in.data != out[q].data()) std::memcpy(out[q].data(), in.data, in.size);
  }
  co_await all_sent{wire};
}

}  // namespace atl::transport::collectives
