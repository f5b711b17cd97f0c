// The coordinator's side of the star all-reduce (transport/star.h, `transport.collective:
// star`). Islands (StarClient, transport/zmq/star_client.h) reach it through the control
// protocol's PUSH and PULL under tags in star::kTagBit's namespace (never handed to the
// server role):
//
//   PUSH star::tag(seq, kData)     the island's contribution: one frame of the coordinator's
//                                  pipeline, with its allreduce_mean weight;
//   PUSH star::tag(S, kFirstSeq)   (empty frame) the island takes part from collective S on
//                                  (it rejoined a running run: ZmqGroupOptions::first_seq);
//   PULL star::tag(seq, kInfo)     answered once the collective is complete: a RESULT_INFO
//                                  body (collectives/attempt.h: status, weight_sum, numel, contributors);
//   PULL star::tag(seq, kData)     then: the same body followed by the mean's frame (no frame
//                                  when there is one contributor: it keeps its own buffer).
//
// Collective `seq` waits for every member that takes part in collectives (a published data
// endpoint) and announced no first_seq above `seq`; it is re-checked on every contribution
// and membership change, so a member that dies is dropped with its contribution, and the
// survivors' mean completes it (status kPeerLost when one of the members it waited for when
// it opened is missing). Contributions are decoded on arrival; the mean is computed once, in
// ascending member id (star::mean), and encoded once, so every member decodes the same
// bytes. A contribution that does not decode, is too large, or disagrees with the others'
// size fails the collective for everyone (status kCorrupt / kInternal).
//
// A finished result is kept until each island that may ask for it has asked about a later
// collective or left (a fetch lost to a reconnection is answered again), at most kMaxKept;
// a later PULL for a finished collective no longer kept is answered with status
// kMembershipChanged and the asker as the only contributor (it keeps its own buffer, as an
// island outside a ring's membership does).
//
// Not thread-safe: owned by CoordinatorState, on the coordinator's loop thread. Never throws
// on peer input.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "compression/pipeline.h"
#include "src/base/status.h"

namespace atl::transport {

class StarReducer {
 public:
  static constexpr size_t kMaxKept = 16;            // finished results kept at most
  static constexpr size_t kFinishedMemory = 1 << 16;  // finished sequence numbers remembered

  // `pipeline` decodes contributions and encodes means (the islands must use the same one);
  // a contribution of more than `max_elements` values fails its collective. Both must
  // outlive the reducer.
  StarReducer(const compression::Pipeline& pipeline, int64_t max_elements)
      : pipeline_(pipeline), max_elements_(max_elements) {}

  // A PUSH under a star tag from island `id`. `members`: the ids that take part in
  // collectives now, ascending.
  void on_push(int id, uint64_t tag, std::span<const uint8_t> frame, double weight,
               const std::vector<int>& members);
  // A PULL under a star tag from island `id`: the reply's bytes (valid until the next call),
  // or nullopt while the collective is running.
  std::optional<std::span<const uint8_t>> on_pull(int id, uint64_t tag);
  // Island `id`'s process is gone (it left, failed, or a new process took its id): its
  // contributions to running collectives and its first_seq are dropped.
  void forget(int id);
  // The members that take part changed: collectives that no longer wait for anyone complete.
  void on_membership(const std::vector<int>& members);

  size_t running() const;  // collectives not complete yet

 private:
  struct Contribution {
    double weight = 1;
    at::Tensor values;  // [numel] float32, decoded
  };
  struct Collective {
    std::set<int> first;                        // members it waited for when it opened
    std::map<int, Contribution> contributions;  // by island id
    int64_t numel = -1;
    Status failure;                             // ok, or why the collective failed
    bool done = false;
    std::vector<int> contributors;              // done: ids in the result
    std::vector<uint8_t> reply;                 // done: RESULT_INFO body, then the mean's frame
    size_t info_bytes = 0;                      // done: the RESULT_INFO body's length
  };

  bool expected(int id, uint64_t seq) const;
  void contribute(int id, uint64_t seq, std::span<const uint8_t> frame, double weight);
  void fail(Collective& c, int id, double weight, Status why);
  void try_complete(uint64_t seq, Collective& c);
  void complete(uint64_t seq, Collective& c);
  void release_fetched();
  std::span<const uint8_t> gone(int id, StatusCode status);

  const compression::Pipeline& pipeline_;
  const int64_t max_elements_;
  std::vector<int> members_;                  // taking part in collectives, ascending
  std::map<uint64_t, Collective> collectives_;
  std::map<int, uint64_t> first_seq_;         // announced by islands that joined late
  std::map<int, uint64_t> fetched_;           // per island: the latest seq it asked about
  std::set<uint64_t> finished_;               // complete collectives (bounded)
  std::vector<uint8_t> scratch_reply_;        // the last "gone" reply
};

}  // namespace atl::transport
