#include "src/core/handover.h"

namespace atl::core {

Handover export_handover(int donor, const algorithms::Algorithm& algorithm, int64_t step, uint64_t first_seq,
                         std::map<uint32_t, uint64_t> subgroup_seqs) {
  Handover h;
  h.donor = donor;
  h.step = step;
  h.first_seq = first_seq;
  h.subgroup_seqs = std::move(subgroup_seqs);
  h.global = algorithm.global_params().clone();
  h.state = algorithm.export_state();
  for (auto& e : h.state.entries())
    if (e.tensor.defined()) e.tensor = e.tensor.clone();  // undefined: e.g. no outer step taken yet
  return h;
}

uint64_t handover_bytes(const Handover& h) {
  uint64_t bytes = static_cast<uint64_t>(h.global.numel()) * sizeof(float);
  for (const auto& e : h.state.entries()) {
    if (e.kind != NamedState::Kind::kTensor) bytes += 8;
    else if (e.tensor.defined()) bytes += static_cast<uint64_t>(e.tensor.numel()) * e.tensor.element_size();
  }
  return bytes;
}

int64_t handover_round(const Handover& h) { return h.state.has("round") ? h.state.integer("round") : 0; }

}  // namespace atl::core
