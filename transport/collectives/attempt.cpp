#include "transport/collectives/attempt.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

#include "src/base/log.h"
#include "src/base/bytes.h"
#include "transport/collectives/schedules.h"

namespace atl::transport::collectives {

namespace {

using Bytes = std::vector<uint8_t>;

using bytes::get_at;
using bytes::put_at;

Status bad(const std::string& what) { return corrupt("data message: " + what); }

// The largest answer: a RESULT_INFO naming kMaxMembers contributors.
constexpr size_t kMaxAnswerBytes = 24 + 4 * size_t{kMaxMembers};

const char* kind_name(uint8_t kind) {
  return kind == kHelloAllreduce ? "an all-reduce" : kind == kHelloBroadcast ? "a broadcast" : "an allgather";
}

// ok, or kPeerLost naming the members of the first attempt that are not in `members`.
Status lost_status(const Request& req, const std::vector<int>& members) {
  std::vector<int> lost;
  for (int p : req.first_members) {
    if (!contains(members, p)) lost.push_back(p);
  }
  if (lost.empty()) return Status::ok();
  return Status(StatusCode::kPeerLost,
                "islands [" + ids_text(lost) + "] left during collective #" + std::to_string(req.seq));
}

}  // namespace

std::vector<uint8_t> encode_hello(const Hello& h) {
  Bytes out(kHelloBytes, 0);
  out[0] = h.kind;
  if (h.kind == kHelloBroadcast) put_at<int32_t>(out.data(), 4, h.root);
  put_at<uint64_t>(out.data(), 8, h.numel);
  put_at<double>(out.data(), 16, h.weight);
  put_at<uint64_t>(out.data(), 24, h.codec);
  put_at<uint64_t>(out.data(), 32, h.piece_elems);
  return out;
}

Status parse_hello(const uint8_t* p, size_t n, Hello* h) {
  if (n != kHelloBytes) return bad("HELLO body size");
  h->kind = p[0];
  if (h->kind != kHelloAllreduce && h->kind != kHelloBroadcast && h->kind != kHelloAllgather) {
    return bad("HELLO of unknown kind");
  }
  const int padding = h->kind == kHelloBroadcast ? 4 : 8;
  for (int i = 1; i < padding; ++i) {
    if (p[i] != 0) return bad("HELLO padding set");
  }
  h->root = h->kind == kHelloBroadcast ? get_at<int32_t>(p, 4) : -1;
  h->numel = get_at<uint64_t>(p, 8);
  h->weight = get_at<double>(p, 16);
  h->codec = get_at<uint64_t>(p, 24);
  h->piece_elems = get_at<uint64_t>(p, 32);
  if (h->kind == kHelloBroadcast && (h->root < 0 || h->root > kMaxIslandId)) return bad("HELLO root out of range");
  if (!std::isfinite(h->weight) || h->weight <= 0) return bad("HELLO weight not finite and > 0");
  if (h->piece_elems == 0) return bad("HELLO piece length 0");
  return Status::ok();
}

std::vector<uint8_t> encode_result_info(const ResultInfo& r) {
  Bytes out(24 + 4 * r.contributors.size(), 0);
  out[0] = static_cast<uint8_t>(r.status);
  put_at<uint32_t>(out.data(), 4, static_cast<uint32_t>(r.contributors.size()));
  put_at<double>(out.data(), 8, r.weight_sum);
  put_at<uint64_t>(out.data(), 16, r.numel);
  for (size_t i = 0; i < r.contributors.size(); ++i) put_at<int32_t>(out.data(), 24 + 4 * i, r.contributors[i]);
  return out;
}

size_t result_info_size(const uint8_t* p, size_t n) {
  if (n < 24) return 0;
  const uint32_t count = get_at<uint32_t>(p, 4);
  return count == 0 || count > kMaxMembers ? 0 : 24 + 4 * size_t{count};
}

Status parse_result_info(const uint8_t* p, size_t n, ResultInfo* r) {
  if (n < 24) return bad("RESULT_INFO body truncated");
  if (p[0] > static_cast<uint8_t>(StatusCode::kInternal) || p[1] || p[2] || p[3]) return bad("RESULT_INFO status");
  const uint32_t count = get_at<uint32_t>(p, 4);
  if (count == 0 || count > kMaxMembers || n != 24 + 4 * size_t{count}) return bad("RESULT_INFO contributor count");
  r->status = static_cast<StatusCode>(p[0]);
  r->weight_sum = get_at<double>(p, 8);
  r->numel = get_at<uint64_t>(p, 16);
  r->contributors.clear();
  for (uint32_t i = 0; i < count; ++i) {
    const int32_t id = get_at<int32_t>(p, 24 + 4 * size_t{i});
    if (id < 0 || id > kMaxIslandId || (i > 0 && id <= r->contributors.back())) {
      return bad("RESULT_INFO contributors not ascending ids");
    }
    r->contributors.push_back(id);
  }
  if (!std::isfinite(r->weight_sum) || r->weight_sum <= 0) return bad("RESULT_INFO weight sum");
  return Status::ok();
}

at::Tensor pack_gathered(const std::vector<std::vector<uint8_t>>& gathered) {
  size_t bytes = 8 + 8 * gathered.size();
  for (const auto& g : gathered) bytes += g.size();
  at::Tensor words = at::zeros({static_cast<int64_t>((bytes + 3) / 4)}, at::kFloat);
  auto* out = static_cast<uint8_t*>(words.data_ptr());
  put_at<uint64_t>(out, 0, gathered.size());
  size_t at = 8 + 8 * gathered.size();
  for (size_t i = 0; i < gathered.size(); ++i) {
    put_at<uint64_t>(out, 8 + 8 * i, gathered[i].size());
    if (!gathered[i].empty()) std::memcpy(out + at, gathered[i].data(), gathered[i].size());
    at += gathered[i].size();
  }
  return words;
}

Status unpack_gathered(const at::Tensor& words, std::vector<std::vector<uint8_t>>* gathered) {
  const auto* in = static_cast<const uint8_t*>(words.data_ptr());
  const uint64_t size = static_cast<uint64_t>(words.numel()) * 4;
  if (size < 8) return corrupt("packed allgather result shorter than its count");
  const uint64_t count = get_at<uint64_t>(in, 0);
  if (count > kMaxMembers || 8 + 8 * count > size) return corrupt("packed allgather result: bad count");
  uint64_t at = 8 + 8 * count;
  std::vector<std::vector<uint8_t>> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t n = get_at<uint64_t>(in, 8 + 8 * i);
    if (n > size - at) return corrupt("packed allgather result: sizes beyond its end");
    out[i].assign(in + at, in + at + n);
    at += n;
  }
  *gathered = std::move(out);
  return Status::ok();
}

Program hand_over(Wire& wire, const Kept& kept, int to, int64_t piece_elems) {
  static const compression::Pipeline fp32;
  const Bytes info = encode_result_info({kept.result.status.code(), kept.result.weight_sum,
                                         static_cast<uint64_t>(kept.values.numel()), kept.result.contributors});
  wire.send(to, {Tag::kResultInfo}, info.data(), info.size(), 0, false);
  BroadcastSetup b{{std::min(to, wire.self()), std::max(to, wire.self())}, wire.self(), kept.values, &fp32,
                   piece_elems, Tag::kResult};
  for (Program inner = broadcast(wire, std::move(b)); !inner.resume();) co_await pending{wire};
}

Program attempt(Wire& wire, Request& req, Attempt a, CollectiveResult* out) {
  static const compression::Pipeline fp32;
  const int self = wire.self();
  const Hello& mine = req.hello;
  const std::string what = "collective #" + std::to_string(req.seq);
  if (mine.kind == kHelloBroadcast && !contains(a.members, mine.root)) {
    *out = {Status(StatusCode::kPeerLost, what + ": broadcast root island " + std::to_string(mine.root) +
                                              " is not a member"),
            {}, 0};
    co_return;
  }

  // 1. Rendezvous: every member's answer, asked for unless known.
  std::map<int, Hello> hellos{{self, mine}};
  int donor = -1;
  Payload answer;  // the donor's RESULT_INFO
  std::vector<int> asked;
  for (int p : a.members) {
    if (p == self) continue;
    auto k = a.known.find(p);
    if (k == a.known.end()) asked.push_back(p);
    else if (k->second == Tag::kResultInfo && donor < 0) donor = p;
  }
  const Bytes hello = encode_hello(mine);
  if (donor >= 0) {
    const RecvId id = wire.post_recv(donor, {Tag::kResultInfo}, nullptr, kMaxAnswerBytes, false);
    answer = co_await receive{wire, id};
  } else {
    std::vector<RecvId> pending_ids;
    for (int p : asked) pending_ids.push_back(wire.post_recv(p, {Tag::kHello}, nullptr, kMaxAnswerBytes, false));
    for (int p : asked) wire.send(p, {Tag::kHello}, hello.data(), hello.size(), 0, false);
    while (!pending_ids.empty() && donor < 0) {
      const size_t i = co_await receive_any{wire, pending_ids};
      const int p = asked[i];
      const Payload in = wire.take(pending_ids[i]);
      pending_ids.erase(pending_ids.begin() + static_cast<std::ptrdiff_t>(i));
      asked.erase(asked.begin() + static_cast<std::ptrdiff_t>(i));
      if (in.tag == Tag::kResultInfo) {
        donor = p;
        answer = in;
      } else if (in.tag == Tag::kHello) {
        Status st = parse_hello(in.data, in.size, &hellos[p]);
        if (!st.is_ok()) throw CorruptFrame(what + ": island " + std::to_string(p) + ": " + st.message());
      } else if (in.tag != Tag::kAbsent) {
        throw CorruptFrame(what + ": island " + std::to_string(p) + " answered with an unknown message");
      }
    }
  }

  // 2. Hand-over: take a finished member's result.
  if (donor >= 0) {
    ResultInfo info;
    Status st = parse_result_info(answer.data, answer.size, &info);
    const bool gather = mine.kind == kHelloAllgather;
    if (st.is_ok() && !gather && info.numel != static_cast<uint64_t>(req.buffer.numel())) {
      st = corrupt("a result of another size");
    }
    if (st.is_ok() && gather && info.numel > (uint64_t{1} << 34)) st = corrupt("an allgather result too large");
    if (!st.is_ok()) throw CorruptFrame(what + ": island " + std::to_string(donor) + " handed over " + st.message());
    if (req.transmitted.defined() && !req.transmitted_filled) req.transmitted.copy_(req.buffer);
    at::Tensor dst = gather                   ? at::empty({static_cast<int64_t>(info.numel)}, at::kFloat)
                     : req.result.defined() ? req.result
                                            : req.buffer;
    BroadcastSetup b{{std::min(donor, self), std::max(donor, self)}, donor, dst, &fp32, req.result_piece_elems,
                     Tag::kResult};
    for (Program inner = broadcast(wire, std::move(b)); !inner.resume();) co_await pending{wire};
    if (gather) {
      if (Status u = unpack_gathered(dst, req.gather_out); !u.is_ok()) {
        throw CorruptFrame(what + ": island " + std::to_string(donor) + " handed over " + u.message());
      }
    }
    ATOLL_INFO(a.where << ": island " << self << " takes " << what << "'s result from island " << donor);
    *out = {info.status == StatusCode::kOk
                ? Status::ok()
                : Status(info.status, what + " lost members (result taken from island " + std::to_string(donor) + ")"),
            std::move(info.contributors), info.weight_sum};
    co_return;
  }

  // 3. The participants agree on what they issued, then run the schedule.
  std::vector<int> parts;
  for (int p : a.members) {
    if (hellos.count(p)) parts.push_back(p);
  }
  for (int p : parts) {
    const Hello& h = hellos[p];
    const bool agree = h.kind == mine.kind && (mine.kind == kHelloAllgather ||
                                               (h.numel == mine.numel && h.codec == mine.codec &&
                                                h.piece_elems == mine.piece_elems && h.root == mine.root));
    if (!agree) {
      std::ostringstream os;
      os << what << ": island " << p << " issued " << kind_name(h.kind) << " of " << h.numel << " (codec " << std::hex
         << h.codec << ", piece " << std::dec << h.piece_elems << ", root " << h.root << "), island " << self << " "
         << kind_name(mine.kind) << " of " << mine.numel << " (codec " << std::hex << mine.codec << ", piece "
         << std::dec << mine.piece_elems << ", root " << mine.root
         << "): members issued different collectives or disagree on the pipeline or chunk_bytes";
      ATOLL_ERROR(a.where << ": " << os.str());
      *out = {Status(StatusCode::kInternal, os.str()), {}, 0};
      co_return;
    }
  }
  Status status = lost_status(req, a.members);
  const double count = static_cast<double>(parts.size());
  const int pos = static_cast<int>(std::find(parts.begin(), parts.end(), self) - parts.begin());
  if (mine.kind == kHelloBroadcast) {
    if (!contains(parts, mine.root)) {
      *out = {Status(StatusCode::kPeerLost, what + ": broadcast root island " + std::to_string(mine.root) +
                                                " does not take part"),
              {}, 0};
      co_return;
    }
    if (parts.size() > 1) {
      wire.data_phase(static_cast<double>(req.codec->max_encoded_size(req.buffer.numel())));
      const at::Tensor& dst = self != mine.root && req.result.defined() ? req.result : req.buffer;
      BroadcastSetup b{parts, mine.root, dst, req.codec, static_cast<int64_t>(mine.piece_elems)};
      for (Program inner = broadcast(wire, std::move(b)); !inner.resume();) co_await pending{wire};
    }
    *out = {std::move(status), parts, count};
    co_return;
  }
  if (mine.kind == kHelloAllgather) {
    if (parts.size() == 1) {
      *req.gather_out = {*req.gather_in};
    } else {
      std::vector<uint64_t> sizes;
      double total = 0;
      for (int p : parts) {
        sizes.push_back(hellos[p].numel);
        total += static_cast<double>(hellos[p].numel);
      }
      wire.data_phase(total);
      AllgatherSetup g{parts, pos, req.gather_in, std::move(sizes), req.gather_out};
      for (Program inner = allgather(wire, std::move(g)); !inner.resume();) co_await pending{wire};
    }
    *out = {std::move(status), parts, count};
    co_return;
  }
  if (parts.size() == 1) {  // the mean of one buffer is that buffer, bitwise
    if (req.transmitted.defined()) req.transmitted.copy_(req.buffer);
    if (req.result.defined()) req.result.copy_(req.buffer);
    req.transmitted_filled = req.transmitted.defined();
    *out = {std::move(status), parts, mine.weight};
    co_return;
  }
  double weight_sum = 0;
  bool uniform = true;
  for (int p : parts) {
    weight_sum += hellos[p].weight;
    uniform = uniform && hellos[p].weight == hellos[parts[0]].weight;
  }
  // Not uniform: the weighted contribution, reduced in place where the result goes.
  const bool weighted_result = !uniform && req.result.defined();
  if (weighted_result) at::mul_out(req.result, req.buffer, mine.weight);
  else if (!uniform) req.buffer.mul_(mine.weight);
  AllreduceSetup s{req.seq, parts, pos, /*buffer=*/weighted_result ? req.result : req.buffer,
                   /*out=*/weighted_result ? at::Tensor() : req.result, /*transmitted=*/req.transmitted, req.codec,
                   /*divisor=*/uniform ? count : weight_sum, static_cast<int64_t>(mine.piece_elems)};
  wire.data_phase(expected_bytes(s));
  // Both schedules fill `transmitted` before their first wait.
  Program inner = allreduce(wire, std::move(s));
  bool finished = inner.resume();
  req.transmitted_filled = req.transmitted.defined();
  while (!finished) {
    co_await pending{wire};
    finished = inner.resume();
  }
  *out = {std::move(status), parts, weight_sum};
}

}  // namespace atl::transport::collectives
