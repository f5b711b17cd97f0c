// The state hand-over of a real run: how an island that rejoins a running run (a restarted
// process with the same id) gets the global model and the outer-optimizer state from a live
// island (src/core/handover.h: the hand-over, its export and import, in both modes). This
// file is its carrier between processes.
//
// Protocol (docs/protocol.md "Rejoining a running run"), over the coordinator's store:
//   1. The joiner joins without a data endpoint: a member of the control plane that takes
//      part in no collective (transport::in_collectives).
//   2. The donor (core::Roles::donor among the members that take part in collectives) sees it at its next step boundary and
//      publishes a Handover (its step, its next collective sequence number in the group and
//      in each sub-group, Algorithm::global_params() and export_state()) under keys naming
//      the joiner, with an xxhash64 checksum, then waits until the joiner takes part (or is
//      gone).
//   3. The joiner reads it, checks the checksum, starts its data plane at the donor's
//      sequence numbers (ZmqGroupOptions::first_seq, first_seqs) and publishes its data endpoint
//      (ZmqControlClient::publish_endpoint): from that epoch on it takes part in collectives,
//      from the donor's next one on, and runs from the donor's step + 1.
//
// The whole hand-over travels through the coordinator: it must fit in its store
// (CoordinatorOptions::max_store_bytes, 256 MiB by default; parts of at most 16 MiB).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/base/status.h"
#include "src/core/handover.h"
#include "src/core/roles.h"
#include "transport/control_plane.h"

namespace atl::run {

// The hand-over itself, one model for both modes (src/core/handover.h); this file carries it.
using Handover = core::Handover;

// The hand-over's bytes (on src/base/bytes.h): "ATHB", u32 version = 4, i32 donor, u64 epoch,
// i64 step, u64 first_seq, the global model (one tensor, src/core/tensor_codec.h), the
// state's named entries (core::put_named_state: a subset of the checkpoint's), then u32 sub-group count
// and (u32 key > 0, u64 next seq) x count in ascending key order. Tensors are copied to the CPU.
std::vector<uint8_t> encode_handover(const Handover& h);
// kCorrupt naming the field for bytes that are truncated, have trailing bytes, a wrong magic,
// version or dtype, or sizes that do not add up. Never reads outside `data`.
Status decode_handover(const uint8_t* data, size_t size, Handover* h);

// The donor's side: stores the hand-over for `joiner` (parts, then the index key with the
// checksum). Errors of the store (kLimit when it is full) are returned.
Status publish_handover(transport::ControlPlane& control, int joiner, const Handover& h);

// The joiner's side: waits for a hand-over to `joiner` made in an epoch >= `min_epoch` (the
// epoch in which this process joined: older ones were meant for an earlier process) by a
// donor that is still a member taking part in collectives (one that left since cannot be
// trusted to wait for the joiner), checks its checksum and decodes it; then frees its parts
// in the store. While there is none, `give_up` is asked about once a second: an error from
// it (e.g. no live island left to hand over) is returned. kTimeout at `deadline`.
StatusOr<Handover> fetch_handover(transport::ControlPlane& control, int joiner, uint64_t min_epoch,
                                  transport::Clock::time_point deadline, const std::function<Status()>& give_up);

// The donor's role, called by every island at each step boundary. Owned by the island thread.
class HandoverDonor {
 public:
  // `make` builds the hand-over at the current step boundary (donor, step, first_seq, the
  // tensors; the epoch is filled in here). `record` receives one JSON record per hand-over.
  // `healthy` says whether this island is still part of the run (an error ends a wait).
  // `roles` says who is a joiner's donor among the members in collectives.
  HandoverDonor(transport::ControlPlane& control, std::function<Handover()> make,
                std::function<void(const std::string&)> record, std::function<Status()> healthy,
                core::Roles roles = core::Roles::dense());

  // For the members that wait for a hand-over this island has not served in the current
  // epoch and whose donor it is (core::Roles::donor): publishes one to each and waits until all of them take part in collectives or are gone, so that its next
  // collective (the hand-over's first_seq) includes them. The wait has no deadline of its
  // own: a joiner bounds each of its steps and exits when one fails (its LEAVE, or the
  // heartbeat timeout, removes it). Cheap otherwise: one look at the membership.
  void at_step_boundary();
  // Whether at_step_boundary() would hand over now (the same look at the membership).
  bool joiners_waiting() const { return !joiners(control_.membership()).empty(); }

 private:
  std::vector<int> joiners(const transport::Membership& m) const;
  transport::ControlPlane& control_;
  std::function<Handover()> make_;
  std::function<void(const std::string&)> record_;
  std::function<Status()> healthy_;
  core::Roles roles_;
  std::map<int, uint64_t> served_;  // joiner -> epoch of the hand-over it got and has not used yet
};

}  // namespace atl::run
