#include "transport/gloo/collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "src/base/hash.h"
#include "transport/ring.h"

namespace atl::transport::gloo_mesh {

namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kHelloBytes = 40;
constexpr size_t kMaxResultIds = 4096;  // as the control protocol's membership limit

template <typename T>
void put(Bytes& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);
}
template <typename T>
T get(const Bytes& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

// A frame as one message: u64 length, then the frame.
Bytes encode_message(const compression::Pipeline& codec, const at::Tensor& src, uint64_t seed) {
  Bytes out(8);
  codec.encode(src, out, seed);
  put<uint64_t>(out, 0, out.size() - 8);
  return out;
}

size_t message_capacity(const compression::Pipeline& codec, int64_t n) { return 8 + codec.max_encoded_size(n); }

// Decodes a received frame message into `out`; counts it. Throws CorruptMessage.
void decode_message(Wire& wire, const compression::Pipeline& codec, const Bytes& msg, at::Tensor out, int from) {
  const uint64_t len = get<uint64_t>(msg, 0);
  Status st = len <= msg.size() - 8 ? codec.decode(msg.data() + 8, len, out)
                                    : corrupt("length " + std::to_string(len) + " beyond the message");
  if (!st.is_ok()) {
    throw CorruptMessage("collective #" + std::to_string(wire.seq()) + ": a frame from island " +
                         std::to_string(from) + " did not decode: " + st.to_string());
  }
  wire.received(8 + len);
}

int64_t chunk_len(int64_t n, int w, int c) {
  auto [b, e] = ring::chunk_bounds(n, w, c);
  return e - b;
}

at::Tensor chunk(const at::Tensor& t, int w, int c) {
  auto [b, e] = ring::chunk_bounds(t.numel(), w, c);
  return t.narrow(0, b, e - b);
}

}  // namespace

uint64_t codec_fingerprint(const compression::Pipeline& codec) {
  Bytes frame;
  codec.encode(at::empty({0}, at::kFloat), frame, 0);
  return xxh3_64(frame.data(), frame.size());
}

std::vector<Hello> exchange_hello(Wire& wire, const std::vector<int>& parts, const Hello& mine) {
  Bytes out(kHelloBytes, 0);
  put<uint8_t>(out, 0, mine.kind);
  put<int32_t>(out, 4, mine.root);
  put<uint64_t>(out, 8, mine.numel);
  put<double>(out, 16, mine.weight);
  put<uint64_t>(out, 24, mine.codec);
  put<uint64_t>(out, 32, mine.piece_elems);
  const int w = static_cast<int>(parts.size());
  std::vector<Bytes> in(w, Bytes(kHelloBytes));
  std::vector<Wire::Message> recvs(w), sends(w);
  for (int q = 0; q < w; ++q) {
    if (parts[q] == wire.self()) continue;
    recvs[q] = wire.recv(parts[q], in[q].data(), kHelloBytes, Kind::kHello, 0);
    sends[q] = wire.send(parts[q], out.data(), kHelloBytes, Kind::kHello, 0, 0);
  }
  std::vector<Hello> hellos(w, mine);
  for (int q = 0; q < w; ++q) {
    if (parts[q] == wire.self()) continue;
    wire.wait(recvs[q]);
    wire.received(kHelloBytes);
    Hello& h = hellos[q];
    h.kind = get<uint8_t>(in[q], 0);
    h.root = get<int32_t>(in[q], 4);
    h.numel = get<uint64_t>(in[q], 8);
    h.weight = get<double>(in[q], 16);
    h.codec = get<uint64_t>(in[q], 24);
    h.piece_elems = get<uint64_t>(in[q], 32);
  }
  for (int q = 0; q < w; ++q) {
    if (parts[q] != wire.self()) wire.wait(sends[q]);
  }
  return hellos;
}

double expected_bytes(const AllreduceSetup& s) {
  const double w = static_cast<double>(s.parts.size());
  return 2.0 * (w - 1) / w * static_cast<double>(s.codec->max_encoded_size(s.buffer.numel()));
}

// See the file comment of collectives.h and ring_exchange.cpp (the same schedule over ZeroMQ).
void ring_allreduce(Wire& wire, const AllreduceSetup& s) {
  const int w = static_cast<int>(s.parts.size());
  const int steps = 2 * (w - 1);
  const int r = s.pos;
  const int next = s.parts[(r + 1) % w], prev = s.parts[(r + w - 1) % w];
  const int64_t n = s.buffer.numel();
  const compression::Pipeline& codec = *s.codec;
  const bool raw = codec.stages().empty();
  float* base = s.buffer.data_ptr<float>();

  auto send_chunk = [&](int t) {
    return t < w - 1 ? ring::reduce_scatter_chunk(r, t, w) : ring::all_gather_chunk(r, t - (w - 1), w);
  };
  auto recv_chunk = [&](int t) { return send_chunk(t + 1); };  // what arrives at t leaves at t + 1
  auto pieces = [&](int c) {
    const int64_t len = chunk_len(n, w, c);
    return static_cast<int>((len + s.piece_elems - 1) / s.piece_elems);
  };
  const int64_t max_chunk = chunk_len(n, w, 0);
  const int max_pieces = pieces(0);
  auto index = [&](int t, int k) { return static_cast<uint32_t>(t * max_pieces + k); };

  // Reduce-scatter input lands in scratch, by step parity: step t + 1's receives are posted
  // while step t is consumed.
  at::Tensor scratch = at::empty({2 * max_chunk}, s.buffer.options());
  std::vector<std::vector<Bytes>> in(2), out(steps);  // encoded pipelines: [parity][piece], [step][piece]
  std::vector<std::vector<Wire::Message>> recvs(steps), sends(steps);

  auto post_recvs = [&](int t) {
    const int c = recv_chunk(t);
    const int64_t len = chunk_len(n, w, c);
    const int p = pieces(c);
    const int64_t cb = ring::chunk_bounds(n, w, c).first;
    in[t % 2].resize(p);
    for (int k = 0; k < p; ++k) {
      auto [pb, pe] = ring::chunk_bounds(len, p, k);
      if (raw) {
        float* dst = t < w - 1 ? scratch.data_ptr<float>() + (t % 2) * max_chunk + pb : base + cb + pb;
        recvs[t].push_back(wire.recv(prev, dst, (pe - pb) * sizeof(float), Kind::kRing, index(t, k)));
      } else {
        Bytes& b = in[t % 2][k];
        b.resize(message_capacity(codec, pe - pb));
        recvs[t].push_back(wire.recv(prev, b.data(), b.size(), Kind::kRing, index(t, k)));
      }
    }
  };
  auto send_piece = [&](int t, int k) {
    const int c = send_chunk(t);
    const int64_t len = chunk_len(n, w, c);
    const int64_t cb = ring::chunk_bounds(n, w, c).first;
    auto [pb, pe] = ring::chunk_bounds(len, pieces(c), k);
    const uint64_t fp32 = (pe - pb) * sizeof(float);
    if (raw) {
      sends[t].push_back(wire.send(next, base + cb + pb, fp32, Kind::kRing, index(t, k), fp32));
    } else {
      out[t].push_back(encode_message(codec, s.buffer.narrow(0, cb + pb, pe - pb), 0));
      sends[t].push_back(wire.send(next, out[t].back().data(), out[t].back().size(), Kind::kRing, index(t, k), fp32));
    }
  };

  if (s.transmitted.defined()) s.transmitted.copy_(s.buffer);
  post_recvs(0);
  for (int k = 0; k < pieces(send_chunk(0)); ++k) send_piece(0, k);
  for (int t = 0; t < steps; ++t) {
    if (t + 1 < steps) post_recvs(t + 1);
    const int c = recv_chunk(t);
    const int64_t len = chunk_len(n, w, c);
    const int64_t cb = ring::chunk_bounds(n, w, c).first;
    const int p = pieces(c);
    for (int k = 0; k < p; ++k) {
      auto [pb, pe] = ring::chunk_bounds(len, p, k);
      at::Tensor dst = s.buffer.narrow(0, cb + pb, pe - pb);
      wire.wait(recvs[t][k]);
      if (t < w - 1) {  // reduce-scatter: own chunk += incoming
        at::Tensor incoming = scratch.narrow(0, (t % 2) * max_chunk + pb, pe - pb);
        if (raw) wire.received((pe - pb) * sizeof(float));
        else decode_message(wire, codec, in[t % 2][k], incoming, prev);
        dst.add_(incoming);
        if (t == w - 2) dst.div_(s.divisor);  // this member owns the chunk's sum now
      } else if (raw) {  // all-gather: the piece landed in place
        wire.received((pe - pb) * sizeof(float));
      } else {
        decode_message(wire, codec, in[t % 2][k], dst, prev);
      }
      if (t + 1 < steps) send_piece(t + 1, k);
    }
  }
  for (auto& step : sends) {
    for (auto& m : step) wire.wait(m);
  }
}

void direct_allreduce(Wire& wire, const AllreduceSetup& s) {
  const int w = static_cast<int>(s.parts.size());
  const int r = s.pos;
  const int64_t n = s.buffer.numel();
  const compression::Pipeline& codec = *s.codec;
  std::vector<Bytes> out0(w), in0(w), in1(w);
  std::vector<Wire::Message> sends, recv0(w), recv1(w);
  for (int q = 0; q < w; ++q) {
    if (q == r) continue;
    in0[q].resize(message_capacity(codec, chunk_len(n, w, r)));
    recv0[q] = wire.recv(s.parts[q], in0[q].data(), in0[q].size(), Kind::kDirect, 0);
    in1[q].resize(message_capacity(codec, chunk_len(n, w, q)));
    recv1[q] = wire.recv(s.parts[q], in1[q].data(), in1[q].size(), Kind::kDirect, 1);
  }
  for (int c = 0; c < w; ++c) {  // phase 0: each foreign chunk, encoded once, to its owner
    at::Tensor src = chunk(s.buffer, w, c);
    if (c == r) {  // the owner's own chunk never leaves it
      if (s.transmitted.defined()) chunk(s.transmitted, w, c).copy_(src);
      continue;
    }
    out0[c] = encode_message(codec, src, ring::direct_seed(wire.seq(), s.parts[r], c, 0));
    if (s.transmitted.defined()) {
      at::Tensor t = chunk(s.transmitted, w, c);
      Status st = codec.decode(out0[c].data() + 8, out0[c].size() - 8, t);
      TORCH_CHECK(st.is_ok(), "direct all-reduce: own encoding failed to decode: ", st.to_string());
    }
    sends.push_back(wire.send(s.parts[c], out0[c].data(), out0[c].size(), Kind::kDirect, 0, src.numel() * 4));
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
    wire.wait(recv0[q]);
    decode_message(wire, codec, in0[q], decoded, s.parts[q]);
    sum.add_(decoded);
  }
  sum.div_(s.divisor);
  const Bytes mean = encode_message(codec, sum, ring::direct_seed(wire.seq(), s.parts[r], r, 1));
  Status st = codec.decode(mean.data() + 8, mean.size() - 8, own);  // what the others decode
  TORCH_CHECK(st.is_ok(), "direct all-reduce: own encoding failed to decode: ", st.to_string());
  for (int q = 0; q < w; ++q) {
    if (q != r) sends.push_back(wire.send(s.parts[q], mean.data(), mean.size(), Kind::kDirect, 1, sum.numel() * 4));
  }
  for (int q = 0; q < w; ++q) {  // phase 1: every owner's mean
    if (q == r) continue;
    wire.wait(recv1[q]);
    decode_message(wire, codec, in1[q], chunk(s.buffer, w, q), s.parts[q]);
  }
  for (auto& m : sends) wire.wait(m);
}

void broadcast(Wire& wire, const std::vector<int>& parts, int root, at::Tensor buffer,
               const compression::Pipeline& codec) {
  const bool raw = codec.stages().empty();
  const uint64_t fp32 = static_cast<uint64_t>(buffer.numel()) * sizeof(float);
  if (wire.self() == root) {
    const Bytes frame = raw ? Bytes() : encode_message(codec, buffer, 0);
    const void* data = raw ? static_cast<const void*>(buffer.data_ptr<float>()) : frame.data();
    const size_t size = raw ? fp32 : frame.size();
    std::vector<Wire::Message> sends;
    for (int q : parts) {
      if (q != root) sends.push_back(wire.send(q, data, size, Kind::kBroadcast, 0, fp32));
    }
    for (auto& m : sends) wire.wait(m);
    return;
  }
  if (raw) {
    Wire::Message m = wire.recv(root, buffer.data_ptr<float>(), fp32, Kind::kBroadcast, 0);
    wire.wait(m);
    wire.received(fp32);
    return;
  }
  Bytes in(message_capacity(codec, buffer.numel()));
  Wire::Message m = wire.recv(root, in.data(), in.size(), Kind::kBroadcast, 0);
  wire.wait(m);
  decode_message(wire, codec, in, buffer, root);
}

// Outcome layout: status u8 · 3 zero bytes · count u32 · weight_sum f64 · numel u64 · ids i32 × count.
void send_result(Wire& wire, int to, const CollectiveResult& result, const at::Tensor& values) {
  const size_t count = result.contributors.size();
  Bytes info(24 + 4 * count, 0);
  put<uint8_t>(info, 0, static_cast<uint8_t>(result.status.code()));
  put<uint32_t>(info, 4, static_cast<uint32_t>(count));
  put<double>(info, 8, result.weight_sum);
  put<uint64_t>(info, 16, static_cast<uint64_t>(values.numel()));
  for (size_t i = 0; i < count; ++i) put<int32_t>(info, 24 + 4 * i, result.contributors[i]);
  const uint64_t fp32 = static_cast<uint64_t>(values.numel()) * sizeof(float);
  Wire::Message a = wire.send(to, info.data(), info.size(), Kind::kResult, 0, 0);
  Wire::Message b = wire.send(to, values.data_ptr<float>(), fp32, Kind::kResult, 1, fp32);
  wire.wait(a);
  wire.wait(b);
}

CollectiveResult receive_result(Wire& wire, int from, at::Tensor buffer) {
  Bytes info(24 + 4 * kMaxResultIds);
  const uint64_t fp32 = static_cast<uint64_t>(buffer.numel()) * sizeof(float);
  Wire::Message a = wire.recv(from, info.data(), info.size(), Kind::kResult, 0);
  Wire::Message b = wire.recv(from, buffer.data_ptr<float>(), fp32, Kind::kResult, 1);
  wire.wait(a);
  const uint32_t count = get<uint32_t>(info, 4);
  if (count > kMaxResultIds || get<uint64_t>(info, 16) != static_cast<uint64_t>(buffer.numel())) {
    throw CorruptMessage("collective #" + std::to_string(wire.seq()) + ": island " + std::to_string(from) +
                         " handed over a result of another size");
  }
  wire.received(24 + 4 * count);
  CollectiveResult r;
  const auto code = static_cast<StatusCode>(get<uint8_t>(info, 0));
  if (code != StatusCode::kOk) {
    r.status = Status(code, "collective #" + std::to_string(wire.seq()) + " lost members (result taken from island " +
                                std::to_string(from) + ")");
  }
  r.weight_sum = get<double>(info, 8);
  for (uint32_t i = 0; i < count; ++i) r.contributors.push_back(get<int32_t>(info, 24 + 4 * i));
  wire.wait(b);
  wire.received(fp32);
  return r;
}

}  // namespace atl::transport::gloo_mesh
