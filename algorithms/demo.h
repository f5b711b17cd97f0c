// DeMo — Decoupled Momentum Optimization (Peng, Quesnelle, Kingma, arXiv 2411.19870), with the
// exact behaviour of the authors' reference (bloc97/DeMo demo.py); docs/algorithms.md §4.
// The algorithm itself is in demo.cpp; this header exposes its pieces for tests: the plan of
// the DCT chunking per tensor, the index codec of the wire message, and the residual.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/base/status.h"

namespace atl::algorithms::demo {

// How one parameter tensor is cut into DCT blocks (docs/algorithms.md §4.2). A 2-D tensor
// [rows, cols] is cut into blocks of n1 x n2 with n1 = sc(rows), n2 = sc(cols), sc(d) = the
// largest divisor of d that is <= chunk; a 1-D tensor (rows = 1) into chunks of n2 = sc(cols)
// (n1 = 1); a tensor of more dimensions is read as [shape[0], prod(rest)] [impl choice].
struct TensorPlan {
  int64_t offset = 0;  // first element in the flat parameter buffer
  int64_t rows = 1, cols = 0;
  bool two_d = false;
  int64_t n1 = 1, n2 = 1;  // block shape
  int64_t blocks = 0;      // (rows / n1) * (cols / n2)
  int64_t k = 0;           // coefficients kept per block: topk clamped to [1, n1 * n2]
  int bits = 0;            // bits of one index within a block: ceil(log2(n1 * n2))
  int64_t numel() const { return rows * cols; }
  int64_t block_size() const { return n1 * n2; }
  int64_t sent() const { return blocks * k; }  // coefficients this tensor sends per step
};

// The plan of every tensor of `layout` (an empty layout is one 1-D tensor of n elements).
std::vector<TensorPlan> plan(const std::vector<ParamRange>& layout, int64_t n, int64_t chunk, int64_t topk);

// Index codec: every block's k indices, ascending, each in `bits` bits (fixed width, packed
// little-endian bit order, the last byte zero-padded). The block an index belongs to is
// implicit (k per block in plan order), so a block of 4096 coefficients costs 12 bits per
// index and a block of one coefficient costs nothing (docs/algorithms.md §4.3 says why).
size_t packed_index_bytes(const std::vector<TensorPlan>& plans);
// Appends the packed indices of `idx` (every tensor's blocks, in plan order) to `out`.
void pack_indices(const std::vector<TensorPlan>& plans, const uint32_t* idx, std::vector<uint8_t>& out);
// Reads exactly packed_index_bytes(plans) bytes from `in` into idx. kCorrupt when an index
// is out of its block, a block's indices are not strictly ascending, or the padding is not 0.
Status unpack_indices(const std::vector<TensorPlan>& plans, const uint8_t* in, size_t size, uint32_t* idx);

// Forward / inverse chunked orthonormal DCT-II of one tensor (x, y: [p.numel()] float32 CPU
// contiguous; coefficient layout: blocks in row-major block order, each block's n1 x n2
// coefficients row-major).
void forward(const TensorPlan& p, const at::Tensor& x, at::Tensor& y);
void inverse(const TensorPlan& p, const at::Tensor& y, at::Tensor& x);

// The k largest |x[0..n)| positions, ascending in idx[0..k); ties to the lower index, NaN
// above +Inf (magnitudes compared as the bit patterns of |x|).
void block_topk(const float* x, int64_t n, int64_t k, uint32_t* idx);

// Per block of every plan, the k largest |x| (block_topk) of x in block layout (each block's
// values contiguous, blocks in plan order): their positions within the block into idx and
// their values into values, sum of sent() of each (SparseLoCo selects this way too).
void select_blocks(const std::vector<TensorPlan>& plans, const float* x, uint32_t* idx, float* values);

// The parts of an exchange over `plans` for a group that cuts its exchanges in `shards`
// (transport::Group::shards(), allgather_parts; islands.shard_exchange, docs/ranks.md "The
// outer exchange, sharded"): consecutive runs of whole tensors, so that each part encodes and
// decodes on its own, cut where the running count of values sent reaches s / shards of the
// total (each part at least one tensor). One part of every plan with one shard or fewer
// tensors than shards; then the message is the unsharded one.
struct PlanPart {
  std::vector<TensorPlan> plans;
  size_t first_plan = 0;  // its first plan's index among all
  int64_t first = 0;      // its first value among the values of every plan, in plan order
  int64_t values = 0;     // the sum of its plans' sent()
};
std::vector<PlanPart> plan_parts(const std::vector<TensorPlan>& plans, int shards);

// One island's DeMo. Owned by that island's thread.
class Demo final : public Algorithm {
 public:
  explicit Demo(const AlgorithmOptions& options) : options_(options), own_(options.get<DemoOptions>()) {}
  std::string name() const override { return "demo"; }
  void setup(IslandContext& ctx) override;
  bool replaces_inner_step() const override { return true; }
  void inner_step(IslandContext& ctx, int64_t step) override;
  at::Tensor global_params() const override { return params_; }
  // [impl choice] A joiner starts with a zero residual (its own momentum is gone with its
  // process; a donor's residual is the donor's own unsent momentum, and copying it would
  // send it twice); only the step count is handed over.
  AlgorithmState export_state() const override;
  void import_state(IslandContext& ctx, const AlgorithmState& state) override;
  // Checkpoint (docs/checkpoints.md): "round" (the step count), "residual" (δ). Every other
  // buffer is scratch, rewritten by each step; the exchange completes within the step.
  AlgorithmCheckpoint state() const override;
  void load(IslandContext& ctx, const AlgorithmCheckpoint& state) override;

  const at::Tensor& residual() const { return delta_; }  // [N] float32 CPU: δ
  const std::vector<TensorPlan>& plans() const { return plans_; }

 private:
  AlgorithmOptions options_;
  DemoOptions own_;
  std::vector<TensorPlan> plans_;
  at::Tensor params_;  // the island's parameters (ctx.params)
  at::Tensor delta_;   // [N] CPU: the momentum residual δ
  at::Tensor coef_;    // [N] CPU: δ's DCT coefficients, then the decoded sums
  at::Tensor values_;  // [K] CPU: the kept coefficients (K = sum of every plan's sent())
  at::Tensor decoded_; // [K] CPU: one contributor's values as decoded
  at::Tensor work_;    // [N] CPU: inverse-DCT output
  std::vector<uint32_t> idx_;    // [K]: this island's indices, then one contributor's
  std::vector<float> count_;     // [N]: contributors of each coefficient
  std::vector<int64_t> touched_; // coefficient positions sent by anyone this step
  int64_t steps_ = 0;
};

}  // namespace atl::algorithms::demo
