// The state hand-over to a joiner, one model for both modes (docs/architecture.md "Hand-over"):
// an island that joins a running run — a rejoiner or an added island — takes the global model
// and the algorithm's state of a live island, its donor (core::Roles::donor), at the donor's
// step boundary, and runs the steps after the donor's from the donor's next collective on.
//
//   donor:  export_handover() at its step boundary (both modes);
//   carrier: the simulator hands the value to the joiner through its hub, which charges the
//           bytes on the donor's link (handover_bytes); a real run sends it through the
//           coordinator's store (src/run/handover.h: its bytes, the protocol);
//   joiner: IslandRuntime::join() (both modes).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>

#include "algorithms/algorithm.h"

namespace atl::core {

struct Handover {
  int donor = -1;
  uint64_t epoch = 0;      // the membership epoch of the hand-over
  int64_t step = 0;        // the donor's last completed inner step: the joiner starts after it
  uint64_t first_seq = 0;  // the donor's next collective: the joiner takes part from it on
  std::map<uint32_t, uint64_t> subgroup_seqs;  // the same for each sub-group the donor made, by key
  at::Tensor global;                           // [N] float32: Algorithm::global_params()
  algorithms::AlgorithmState state;            // Algorithm::export_state(): named, undefined tensors allowed
};

// The donor's side: `algorithm`'s state at the boundary after `step`, copied (the donor goes on
// training on its own buffers). `first_seq` and `subgroup_seqs`: the donor's next collective
// in its group and in each sub-group; the epoch is the carrier's to fill in.
Handover export_handover(int donor, const algorithms::Algorithm& algorithm, int64_t step, uint64_t first_seq,
                         std::map<uint32_t, uint64_t> subgroup_seqs = {});

// The bytes of the hand-over's values (the global model, the state's defined tensors and 8 a
// scalar entry): what the simulator charges on the donor's link.
uint64_t handover_bytes(const Handover& h);

// The outer rounds the donor had completed (its state's "round"; 0 for an algorithm that
// hands over none), for the rejoin record.
int64_t handover_round(const Handover& h);

}  // namespace atl::core
