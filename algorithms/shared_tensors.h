// State that is bitwise the same on many simulated islands, held once (docs/simulator.md
// "Memory"). A DiLoCo-family simulation keeps, per island, a global model and an outer
// optimizer state that every island in step with the others holds bitwise alike; the
// simulator hands every island one SharedTensors, and an algorithm passes such a tensor
// through share() after each change: an equal tensor already held is returned instead, and
// the island's own copy is freed. Shared tensors are read-only: before writing one in place,
// an algorithm calls writable(), which gives it a private copy. Islands that differ (a
// partition, a joiner a round behind) simply hold different tensors; nothing changes in the
// numbers.
//
// Real runs have one island per process and no SharedTensors (IslandContext::shared is null).
// Used by the simulator's island threads one at a time; a mutex guards it anyway.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace atl::algorithms {

class SharedTensors {
 public:
  // A tensor bitwise equal to `t` (a contiguous CPU float tensor; anything else is returned
  // as it is), held here and possibly by other islands.
  at::Tensor share(const at::Tensor& t);
  // Replaces `t` by a private copy when it came from share(); no-op otherwise.
  void writable(at::Tensor& t);
  // Distinct tensors held (a diagnostic for tests).
  size_t held();

 private:
  void drop_unused();  // tensors no island holds any more
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<at::Tensor>> by_hash_;
  std::unordered_set<const void*> shared_;  // TensorImpls handed out by share()
};

// `t` through `shared` when there is one (the simulator), else `t`.
inline at::Tensor share(SharedTensors* shared, const at::Tensor& t) { return shared ? shared->share(t) : t; }
inline void writable(SharedTensors* shared, at::Tensor& t) {
  if (shared) shared->writable(t);
}

}  // namespace atl::algorithms
