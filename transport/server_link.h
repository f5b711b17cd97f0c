// The island side of the server role (transport/outer_server.h) in real runs: Group::push
// and Group::pull over ControlPlane::push/pull, for every networked group (ZmqGroup,
// GlooGroup). Frames are encoded exactly as InprocGroup encodes them (push seed
// (tag << 16) ^ island id), so a server in the coordinator sees what the simulator's sees.
// NetGroup: what those groups share (the control plane, push/pull, sequence numbers).
//
// Thread-safe: push/pull run on the calling thread and block until the control plane
// answers; the byte counters are atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "transport/control_plane.h"
#include "transport/group.h"

namespace atl::transport {

class ServerLink {
 public:
  explicit ServerLink(ControlPlane& control) : control_(control) {}

  // Encodes `buffer` and hands the frame to ControlPlane::push; `transmitted` (optional)
  // receives what the server decodes. A done handle: ok with {self} and `weight`, or the
  // control plane's error.
  std::unique_ptr<Handle> push(uint64_t tag, const at::Tensor& buffer, const compression::Pipeline& codec,
                               double weight, at::Tensor transmitted);
  // ControlPlane::pull (waits until the server answers), decoded into `out`.
  std::unique_ptr<Handle> pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec);

  // The frames' bytes so far (sent: pushed frames; received: pulled frames).
  ByteCounters bytes() const;

 private:
  ControlPlane& control_;
  std::atomic<uint64_t> sent_{0}, received_{0}, raw_{0};
};

// The base of the networked groups (ZmqGroup, GlooGroup): their control plane, push/pull
// through a ServerLink, and the sequence numbers of the group and of its sub-groups.
class NetGroup : public Group {
 public:
  // ServerLink::push / pull (above).
  std::unique_ptr<Handle> push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec, double weight,
                               at::Tensor transmitted = {}) override {
    return server_.push(tag, buffer, codec, weight, std::move(transmitted));
  }
  std::unique_ptr<Handle> pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec) override {
    return server_.pull(tag, std::move(out), codec);
  }

  // The sequence number of the next collective issued here (island thread, like the calls),
  // and that of this group (key 0) and of every sub-group made from it or named in the
  // options' first_seqs, by key: a joiner handed this island's state, or a run resumed from
  // a checkpoint, takes part in each from there (the options' first_seq / first_seqs).
  uint64_t next_seq() const { return next_seq_; }
  std::map<uint32_t, uint64_t> next_seqs() const { return *seqs_; }
  // A real run resumed from a checkpoint: the result of the collective that was in flight at
  // the cut (the options' in_flight; its data came back with the algorithm's own state), once.
  std::unique_ptr<Handle> resume_in_flight() override {
    if (!in_flight_) return nullptr;
    auto handle = std::make_unique<DoneHandle>(std::move(*in_flight_));
    in_flight_.reset();
    return handle;
  }

 protected:
  // The group of every island: its first collective is number `first_seq`, sub-group
  // `key`'s first_seqs[key] (absent: 0); `in_flight` for resume_in_flight().
  NetGroup(ControlPlane& control, uint64_t first_seq, const std::map<uint32_t, uint64_t>& first_seqs,
           std::optional<CollectiveResult> in_flight)
      : control_(control), server_(control), seqs_(std::make_shared<std::map<uint32_t, uint64_t>>(first_seqs)),
        next_seq_((*seqs_)[0]), in_flight_(std::move(in_flight)) {
    next_seq_ = first_seq;
  }
  // Sub-group `key` of `parent`'s islands `ids`, numbered on from an earlier one with this key.
  NetGroup(const NetGroup& parent, uint32_t key, std::vector<int> ids)
      : control_(parent.control_), server_(control_), seqs_(parent.seqs_), next_seq_((*seqs_)[key]), key_(key),
        ids_(std::move(ids)) {}

  ControlPlane& control_;
  ServerLink server_;
  std::shared_ptr<std::map<uint32_t, uint64_t>> seqs_;  // next seqs by key, shared with the sub-groups
  uint64_t& next_seq_;          // (*seqs_)[key_]
  const uint32_t key_ = 0;      // 0: the group of every island; else a sub-group's key
  const std::vector<int> ids_;  // a sub-group's islands (empty: every island)
  std::optional<CollectiveResult> in_flight_;
};

}  // namespace atl::transport
