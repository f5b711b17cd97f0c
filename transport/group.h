// The communication interface algorithms are written against. An algorithm never knows
// whether its Group is the in-process one (simulation), ZeroMQ or Gloo.
//
// Collectives are asynchronous: they return a Handle at once; the caller keeps the buffer
// alive and untouched until the handle is done. Every member must issue the same sequence
// of collectives (they are matched by their order). A collective that loses a member
// completes with the survivors' contributions and says who contributed.
//
// Thread-safety: a Group object belongs to one island (one thread); different islands'
// groups may be used concurrently.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "compression/pipeline.h"
#include "src/base/status.h"

namespace atl::transport {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;  // nullopt = wait forever

struct MembershipView {
  uint64_t epoch = 0;            // bumps on every join/leave
  std::vector<int> members;      // live island ids, ascending
  int self = -1;                 // this island's id
};

struct CollectiveResult {
  Status status;                 // ok; kTimeout; kPeerLost (then `contributors` < members)
  std::vector<int> contributors; // ids whose data is in the result, ascending
  double weight_sum = 0;         // allreduce_mean: sum of the contributors' weights
};

// Bytes this island placed on / took off the wire, as counted by the transport itself
// (encoded payloads and frame headers), cumulative since the group was made.
struct ByteCounters {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t raw_sent = 0;  // fp32 size of what was sent before encoding (for ratios)
  ByteCounters& operator+=(const ByteCounters& o) {
    sent += o.sent, received += o.received, raw_sent += o.raw_sent;
    return *this;
  }
};

class Handle {
 public:
  virtual ~Handle() = default;
  virtual bool done() const = 0;
  // Blocks until the collective completes or the deadline passes (kTimeout; the collective
  // may still complete later). The result is final once returned with a status other than
  // kTimeout.
  virtual CollectiveResult wait(Deadline deadline = std::nullopt) = 0;
};

// A handle for an operation that completed before it was returned (push, pull, errors).
class DoneHandle final : public Handle {
 public:
  explicit DoneHandle(CollectiveResult r) : result_(std::move(r)) {}
  bool done() const override { return true; }
  CollectiveResult wait(Deadline) override { return result_; }

 private:
  CollectiveResult result_;
};

class Group {
 public:
  virtual ~Group() = default;

  virtual MembershipView view() const = 0;

  // buffer <- sum_i w_i * buffer_i / sum_i w_i over the contributors i (`weight` is this
  // island's w_i > 0). `buffer`: [n] float32 contiguous, same n on every member; encoded
  // with `codec` on the wire. After completion every contributor holds bitwise the same
  // result.
  // Lossless codecs run a ring all-reduce. Lossy codecs encode each contribution once and
  // accumulate in fp32 (reduce-scatter to chunk owners, then an all-gather of each owner's
  // re-encoded sum): the same bytes as a ring, two quantisations instead of W.
  // `transmitted`, when defined ([n] float32), receives this member's contribution as the
  // others decoded it (for error feedback); it is filled before `buffer` is overwritten.
  virtual std::unique_ptr<Handle> allreduce_mean(at::Tensor buffer,
                                                 const compression::Pipeline& codec,
                                                 double weight = 1.0,
                                                 at::Tensor transmitted = {}) = 0;

  // buffer <- root's buffer on every member.
  virtual std::unique_ptr<Handle> broadcast(int root, at::Tensor buffer,
                                            const compression::Pipeline& codec) = 0;

  // Every contributor's `bytes` (any length, may differ between members): on completion
  // (*out)[i] holds the bytes of result.contributors[i] (ascending ids), this member's own
  // among them. `out` must stay alive and untouched until the handle is done. Like the other
  // collectives, a member lost mid-way is left out and the result says so (kPeerLost).
  virtual std::unique_ptr<Handle> allgather(std::vector<uint8_t> bytes,
                                            std::vector<std::vector<uint8_t>>* out) = 0;

  // The shards this group cuts an island's exchanges into: 1, but for the island of R ranks
  // whose exchange is sharded (islands.shard_exchange; transport/shards.h), where shard s
  // travels with rank s. allreduce_mean cuts its buffer itself; an allgather's message is
  // opaque, so an algorithm that can cut its message in parts that decode on their own
  // (DeMo, SparseLoCo: whole tensors) passes shards() parts, or one, to allgather_parts:
  // (*out)[s][i] holds part s of the message of result.contributors[i], and every part ends
  // with the same contributors. One part is allgather itself.
  virtual int shards() const { return 1; }
  virtual std::unique_ptr<Handle> allgather_parts(std::vector<std::vector<uint8_t>> parts,
                                                  std::vector<std::vector<std::vector<uint8_t>>>* out) {
    if (parts.size() != 1) throw std::logic_error("allgather_parts: this group does not shard its exchanges");
    out->assign(1, {});
    return allgather(std::move(parts[0]), &(*out)[0]);
  }

  // The group of the islands in `ids` (ascending, containing this island) that share
  // something, e.g. the islands whose paths go through one module. Its collectives
  // involve only those islands (live members among them), are numbered and matched on their
  // own (every island of `ids` must issue the same sequence on its sub-group), and may be in
  // flight together with those of the parent group and of other sub-groups. `key` (> 0)
  // names the sub-group on the wire: islands agree on key <-> ids. The sub-group uses its
  // parent's transport and must not outlive it; bytes() counts the parent's traffic.
  // Survivor semantics as for the whole group: a member of the sub-group lost mid-way is
  // left out of that collective (kPeerLost); islands outside the sub-group never wait for it.
  virtual std::unique_ptr<Group> subgroup(uint32_t key, std::vector<int> ids) = 0;

  // Server role (OuterServer, see algorithms/outer_server.h). push delivers `buffer` with
  // `weight` under `tag` (`transmitted` as in allreduce_mean); pull fills `out` with the
  // server's answer to `tag`, waiting until the server has one.
  virtual std::unique_ptr<Handle> push(uint64_t tag, at::Tensor buffer,
                                       const compression::Pipeline& codec, double weight,
                                       at::Tensor transmitted = {}) = 0;
  virtual std::unique_ptr<Handle> pull(uint64_t tag, at::Tensor out,
                                       const compression::Pipeline& codec) = 0;

  virtual ByteCounters bytes() const = 0;

  // Simulator checkpoints (docs/checkpoints.md): the handle of this member's oldest
  // collective on this group that was in flight (posted by every member, complete, not yet
  // collected by this one) when the checkpoint was taken and that was restored with it; its
  // result lands in nothing (the algorithm restores its buffers itself), wait() returns it.
  // nullptr when there is none, and on transports that do not restore checkpoints (default).
  virtual std::unique_ptr<Handle> resume_in_flight() { return nullptr; }
};

// Checks subgroup()'s arguments for island `self` (c10::Error): key > 0, `ids` ascending,
// distinct, containing `self`.
inline void check_subgroup(uint32_t key, const std::vector<int>& ids, int self) {
  TORCH_CHECK(key > 0, "subgroup: key 0 is the group of every island");
  TORCH_CHECK(std::is_sorted(ids.begin(), ids.end()) && std::adjacent_find(ids.begin(), ids.end()) == ids.end(),
              "subgroup: ids must be ascending and distinct");
  TORCH_CHECK(std::binary_search(ids.begin(), ids.end(), self), "subgroup: island ", self, " is not in it");
}

// The members (ascending) that are in `ids` (ascending; empty: all of them).
inline std::vector<int> within(std::vector<int> members, const std::vector<int>& ids) {
  if (!ids.empty()) std::erase_if(members, [&](int m) { return !std::binary_search(ids.begin(), ids.end(), m); });
  return members;
}

// "1, 3, 4": ids for log lines and error messages.
inline std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ids[i]);
  }
  return s;
}

inline bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The checks every Group applies to a collective's buffer and to allreduce_mean's arguments
// (c10::Error: a caller's bug, not a WAN outcome).
inline void check_buffer(const at::Tensor& t) {
  TORCH_CHECK(t.defined() && t.is_contiguous() && t.scalar_type() == at::kFloat && t.device().is_cpu(),
              "collectives take contiguous float32 CPU buffers");
}
inline void check_allreduce(const at::Tensor& buffer, double weight, const at::Tensor& transmitted) {
  TORCH_CHECK(std::isfinite(weight) && weight > 0, "allreduce_mean weight must be finite and > 0");
  check_buffer(buffer);
  TORCH_CHECK(!transmitted.defined() || (transmitted.numel() == buffer.numel() && transmitted.is_contiguous() &&
                                         transmitted.scalar_type() == at::kFloat),
              "allreduce_mean: `transmitted` must match the buffer");
}

// The data planes' timeout for a transfer of `bytes`: slack * (latency + bytes / bandwidth) + 1 s.
inline Clock::duration transfer_timeout(double slack, double latency_s, double bytes, double bytes_per_s) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(slack * (latency_s + bytes / bytes_per_s) + 1.0));
}

// Waits on `cv` (with `lock` held) until pred() holds or the deadline passes (nullopt:
// forever); returns pred()'s last value.
template <typename Pred>
bool wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Deadline deadline, Pred pred) {
  if (!deadline) {
    cv.wait(lock, pred);
    return true;
  }
  return cv.wait_until(lock, *deadline, pred);
}

}  // namespace atl::transport
