// The outer optimizer: treats the averaged pseudo-gradient Δ as a gradient of θ_g.
// docs/algorithms.md §0: Nesterov exactly as torch.optim.SGD(momentum=mu, nesterov=True):
//   buf <- mu*buf + Δ;  θ_g <- θ_g - lr*(Δ + mu*buf)
// SGD (momentum mu, no nesterov): buf <- mu*buf + Δ; θ_g <- θ_g - lr*buf (mu = 0: -lr*Δ).
// Adam: standard bias-corrected Adam with eps (DiLoCo: large eps, e.g. 0.1).
// State: momentum buffer [N] (nesterov/sgd), two moments [N] + step (adam).
//
// An island of R ranks with a sharded outer exchange (islands.shard_exchange; docs/ranks.md
// "Outer state, sharded") shards this state too: given OuterShards, rank r keeps the state of
// shard r (transport::shard_ranges) of each buffer it steps, updates that shard of theta_g, and
// the ranks then share the updated shards, so that every rank holds the whole theta_g and 1/R
// of the state. The update is element-wise, so the shards' updates are the whole update's
// values (tests/algorithms/outer_optimizer_test.cpp holds them to it bitwise).
//
// Owned by one island (or the server); not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "algorithms/options.h"
#include "algorithms/shared_tensors.h"
#include "src/base/named_state.h"
#include "transport/shards.h"

namespace atl::algorithms {

class OuterOptimizer;

// The ranks of one island that shard the outer optimizers' state (see above). The run layer
// implements share() over the island's c10d group (src/run/island_ranks.h); null in the
// simulator, which steps whole buffers (the same values), and for islands of one rank.
// Every rank makes the same optimizers in the same order and steps them alike, so the
// collectives below match across ranks.
class OuterShards {
 public:
  virtual ~OuterShards() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // A collective of the island's ranks: rank r's range ranges[r] of `t` (contiguous [n]) into
  // every rank's `t`.
  virtual void share(at::Tensor& t, const std::vector<transport::ShardRange>& ranges) = 0;

  // Every rank, at a checkpoint cut and before a hand-over, after the algorithm's exchanges
  // there: each enrolled optimizer's whole state is put together on rank 0, whose save()
  // then writes it as an unsharded optimizer would (the files and hand-overs are the same as
  // for R = 1). release_all() drops it again once rank 0's state was taken.
  void gather_all();
  void release_all();
  // The optimizers that place() was given this to; an optimizer leaves when destroyed.
  void enroll(OuterOptimizer* o) { enrolled_.push_back(o); }
  // No optimizer enrolled (ddp, DeMo, SparseLoCo): nothing to gather, on every rank alike.
  bool empty() const { return enrolled_.empty(); }
  void leave(OuterOptimizer* o);
  // The state values this rank holds over every enrolled optimizer, and those the island's
  // whole state has (docs/ranks.md: the first is about 1/R of the second).
  int64_t values_held() const;
  int64_t values_whole() const;

 private:
  std::vector<OuterOptimizer*> enrolled_;
};

class OuterOptimizer {
 public:
  explicit OuterOptimizer(OuterOptimizerOptions options) : options_(options) {}
  // A copy is not enrolled in the original's OuterShards.
  OuterOptimizer(const OuterOptimizer& o);
  OuterOptimizer& operator=(const OuterOptimizer&) = delete;
  ~OuterOptimizer();
  // theta_g -= update(delta). Both [N] float32 on the same device (theta_g contiguous). Under
  // no-grad. With OuterShards, a collective of the island's ranks.
  void step(at::Tensor& theta_g, const at::Tensor& delta);
  // Where the state lives, from the algorithm's setup (IslandContext::shared, ::outer_shards):
  // the simulator's `shared`, through which the state goes after every step
  // (docs/simulator.md "Memory"), so that islands in step hold it once; an island's ranks'
  // `shards` (enrolls this optimizer). Either may be null.
  void place(SharedTensors* shared, OuterShards* shards);
  int64_t steps() const { return steps_; }
  // This rank's: the whole momentum, or its shard's when sharded.
  const at::Tensor& momentum() const { return buf_; }
  // Its state as named entries (src/base/named_state.h), for checkpoints and hand-overs:
  // `prefix`.steps (integer), `prefix`.momentum (nesterov / sgd momentum, adam first moment)
  // and `prefix`.second_moment (adam), tensors undefined until they are used. load() reads
  // them back (copies, on `device`; sharded: this rank's shard of them). Sharded, save()
  // writes the state gather_all() put together (on rank 0; refused without it).
  void save(NamedState& s, const std::string& prefix) const;
  void load(const NamedState& s, const std::string& prefix, c10::Device device);

 private:
  friend class OuterShards;
  OuterOptimizerOptions options_;
  at::Tensor buf_;  // nesterov/sgd momentum; adam first moment (sharded: this rank's shard)
  at::Tensor v_;    // adam second moment (likewise)
  int64_t steps_ = 0;
  SharedTensors* shared_ = nullptr;
  OuterShards* shards_ = nullptr;
  int64_t n_ = 0;  // the buffer's size, once stepped or loaded
  at::Tensor whole_buf_, whole_v_;  // sharded, on rank 0 between gather() and release()
  void update(at::Tensor& theta_g, const at::Tensor& delta);
  // The shards of an n-value buffer this state is cut into; empty: held whole.
  std::vector<transport::ShardRange> ranges(int64_t n) const;
  void gather();
};

}  // namespace atl::algorithms
