// SparseLoCo (Sarfi, Thérien, Lidin, Belilovsky, arXiv 2508.15706; Templar's outer loop for
// Covenant-72B): DiLoCo's outer loop without outer momentum, sending the top-k of an
// error-feedback accumulator, each value in 2 bits. docs/algorithms.md §13.
//
// Update rule, every H inner steps (and at the last step), per island i:
//   Delta_i = theta_g - theta_i                        (old minus new, as DiLoCo)
//   e_i    <- beta e_i + Delta_i                       (beta = algorithm.decay, 0.95)
//   per tile of every tensor (2-D: sc(rows) x sc(cols) tiles, sc = the largest divisor
//   <= algorithm.chunk, 64; 1-D: runs of sc(n); as DeMo's blocks, docs/algorithms.md §4.2):
//     the k = min(algorithm.topk, tile size) largest |e_i| (ties to the lower index)
//   m_i     = those values through the value codec (compression:, e.g. [{quantize: lut2}]),
//             one frame per tensor, so each tensor has its own lut2 table (as Templar)
//   e_i    <- e_i - decode(m_i) at the sent positions  (what the others will see)
//   allgather m_i;  S = sum over contributors of decode(m_j), scattered
//   U = S / R   (aggregation: mean_all, R = contributors: the paper's rule, the default)
//   U = S / n   (mean_selected: per coordinate, n = contributors that sent it; Templar's code)
//   theta_g <- theta_g - alpha U  (alpha = algorithm.outer_lr, 1.0);  theta_i <- theta_g
// Every island applies the same U from the same gathered bytes; all of it on the CPU.
// State per island: theta_g [N] (the parameters' device), e [N], the tiled accumulator and
//   the tiled sum [N] (CPU scratch); K values and indices (K = sum of k over tiles).
// Bytes on the wire per round and island: one allgather of
//   [indices: k * ceil(log2(tile size)) bits per tile (12 for 64 x 64), padded to a byte]
//   [per tensor: u32 frame size, one codec frame of its k * tiles values]
// sent to W - 1 peers; cut in parts of whole tensors when the island's ranks shard the
// exchange (demo::plan_parts; docs/ranks.md), the same frames. With lut2: 2 bits a value plus 74 bytes a tensor (u32 size, 50-byte
// frame header, shift and table).
// [impl choice] A joiner starts with e = 0 and the round count (as DeMo's residual: a
// donor's accumulator is its own unsent update). Checkpoints hold "round", "anchor", "error".
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <memory>
#include <string>
#include <vector>

#include "algorithms/builtin.h"
#include "algorithms/demo.h"
#include "algorithms/exchange.h"
#include "src/base/bytes.h"

namespace atl::algorithms {
namespace {

// Tile-major order of a tensor: each tile's elements contiguous (row-major inside the tile),
// tiles in row-major tile order; a 1-D tensor is already in it.
void to_tiles(const demo::TensorPlan& p, const at::Tensor& x, at::Tensor& y) {
  if (!p.two_d) return void(y.copy_(x));
  const int64_t a = p.rows / p.n1, b = p.cols / p.n2;
  y.view({a, b, p.n1, p.n2}).copy_(x.view({a, p.n1, b, p.n2}).permute({0, 2, 1, 3}));
}

void from_tiles(const demo::TensorPlan& p, const at::Tensor& y, at::Tensor& x) {
  if (!p.two_d) return void(x.copy_(y));
  const int64_t a = p.rows / p.n1, b = p.cols / p.n2;
  x.view({a, p.n1, b, p.n2}).copy_(y.view({a, b, p.n1, p.n2}).permute({0, 2, 1, 3}));
}

class SparseLoCo final : public Algorithm {
 public:
  explicit SparseLoCo(const AlgorithmOptions& options) : options_(options), own_(options.get<SparseLocoOptions>()) {}

  std::string name() const override { return "sparseloco"; }

  void setup(IslandContext& ctx) override {
    // A transform or sparsify stage cannot apply: SparseLoCo selects its values itself.
    if (auto problem = algorithms::codec_problem(name(), ctx.codec->stages())) throw UserError("compression: " + *problem);
    at::NoGradGuard no_grad;
    const int64_t n = ctx.params.numel();
    plans_ = demo::plan(ctx.layout, n, own_.chunk, own_.topk);
    int64_t sent = 0;
    for (const auto& p : plans_) sent += p.sent();
    const auto cpu = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
    anchor_ = share(ctx.shared, ctx.params.detach().clone());  // held once for islands in step
    error_ = at::zeros({n}, cpu);
    tiles_ = at::zeros({n}, cpu);
    sum_ = at::zeros({n}, cpu);
    values_ = at::zeros({sent}, cpu);
    decoded_ = at::zeros({sent}, cpu);
    idx_.assign(static_cast<size_t>(sent), 0);
    if (own_.aggregation == Aggregation::kMeanSelected) count_.assign(static_cast<size_t>(n), 0.0f);
  }

  int64_t planned_steps(int64_t configured) override {
    last_step_ = configured;
    return configured;
  }

  void after_inner_step(IslandContext& ctx, int64_t step) override {
    if (step % own_.inner_steps != 0 && step != last_step_) return;
    at::NoGradGuard no_grad;
    const at::Tensor params = ctx.params.device().is_cpu() ? ctx.params : ctx.params.to(at::kCPU);
    const at::Tensor anchor = anchor_.device().is_cpu() ? anchor_ : anchor_.to(at::kCPU);
    error_.mul_(own_.decay).add_(anchor - params);

    // This island's message: per tile the k largest |e|, their values through the codec.
    for (const auto& p : plans_) {
      at::Tensor y = tiles_.narrow(0, p.offset, p.numel());
      to_tiles(p, error_.narrow(0, p.offset, p.numel()), y);
    }
    demo::select_blocks(plans_, tiles_.data_ptr<float>(), idx_.data(), values_.data_ptr<float>());
    // The message, in parts of whole tensors when the group shards the exchange (one otherwise:
    // the parts are the unsharded message cut between tensors, each frame with its own seed).
    const std::vector<demo::PlanPart> parts = demo::plan_parts(plans_, ctx.group->shards());
    std::vector<std::vector<uint8_t>> messages(parts.size());
    std::vector<size_t> index_bytes(parts.size());
    for (size_t q = 0; q < parts.size(); ++q) {
      demo::pack_indices(parts[q].plans, idx_.data() + parts[q].first, messages[q]);
      index_bytes[q] = messages[q].size();
      encode_values(ctx, parts[q], messages[q]);
    }

    // e -= what the others will decode of it (in tile order, then back).
    for (size_t q = 0; q < parts.size(); ++q) {
      const std::vector<uint8_t>& message = messages[q];
      const Status own = decode_values(ctx, parts[q], message.data() + index_bytes[q], message.size() - index_bytes[q]);
      TORCH_CHECK(own.is_ok(), "sparseloco: own message does not decode: ", own.message());
      scatter(parts[q], decoded_, tiles_, -1.0f, false);
    }
    for (const auto& p : plans_) {
      at::Tensor x = error_.narrow(0, p.offset, p.numel());
      from_tiles(p, tiles_.narrow(0, p.offset, p.numel()), x);
    }

    // Exchange; U = the sum of every contributor's decoded values over R (or per coordinate).
    const RoundMeter meter(*ctx.group);
    std::vector<std::vector<std::vector<uint8_t>>> gathered;
    const transport::CollectiveResult result = ctx.group->allgather_parts(std::move(messages), &gathered)->wait();
    require_usable(result, ctx, "sparseloco allgather", step);
    sum_.zero_();
    for (size_t q = 0; q < parts.size(); ++q) {
      const demo::PlanPart& part = parts[q];
      const size_t ib = index_bytes[q];
      for (size_t m = 0; m < gathered[q].size(); ++m) {
        const auto& bytes = gathered[q][m];
        Status s = bytes.size() >= ib ? demo::unpack_indices(part.plans, bytes.data(), ib, idx_.data() + part.first)
                                      : corrupt("sparseloco message: shorter than its indices");
        if (s.is_ok()) s = decode_values(ctx, part, bytes.data() + ib, bytes.size() - ib);
        if (!s.is_ok()) {
          throw StatusError("island " + std::to_string(ctx.island) + ": sparseloco message of island " +
                                std::to_string(result.contributors[m]) + " at step " + std::to_string(step),
                            s);
        }
        scatter(part, decoded_, sum_, 1.0f, own_.aggregation == Aggregation::kMeanSelected);
      }
    }
    if (own_.aggregation == Aggregation::kMeanAll) {
      sum_.div_(static_cast<double>(result.contributors.size()));
    } else {
      float* s = sum_.data_ptr<float>();
      for (size_t i = 0; i < count_.size(); ++i) {
        if (count_[i] > 0) s[i] /= count_[i];
        count_[i] = 0;
      }
    }
    for (const auto& p : plans_) {  // the update U, in parameter order, into tiles_
      at::Tensor x = tiles_.narrow(0, p.offset, p.numel());
      from_tiles(p, sum_.narrow(0, p.offset, p.numel()), x);
    }
    writable(ctx.shared, anchor_);
    anchor_.sub_(tiles_.device() == anchor_.device() ? tiles_ : tiles_.to(anchor_.device()), own_.outer_lr);
    anchor_ = share(ctx.shared, anchor_);
    ctx.params.copy_(anchor_);
    ++round_;
    if (ctx.on_round) {
      ctx.on_round(meter.finish(*ctx.group, round_, step, static_cast<int>(result.contributors.size()),
                                tiles_.norm().item<double>()));
    }
  }

  at::Tensor global_params() const override { return anchor_; }

  AlgorithmState export_state() const override { return state().only({"round"}); }
  void import_state(IslandContext&, const AlgorithmState& state) override { round_ = state.integer("round"); }

  // Checkpoint: "round", "anchor" (theta_g), "error" (e). The exchange completes within the
  // round, so nothing is ever in flight at a step boundary.
  AlgorithmCheckpoint state() const override {
    return AlgorithmCheckpoint().add("round", round_).add("anchor", anchor_).add("error", error_);
  }
  void load(IslandContext& ctx, const AlgorithmCheckpoint& state) override {
    const at::Tensor &anchor = state.tensor("anchor"), &error = state.tensor("error");
    TORCH_CHECK(anchor.defined() && anchor.numel() == anchor_.numel() && error.defined() &&
                    error.numel() == error_.numel(),
                "sparseloco checkpoint: expected the global model and the accumulator of ", error_.numel(), " elements");
    at::NoGradGuard no_grad;
    round_ = state.integer("round");
    writable(ctx.shared, anchor_);
    anchor_.copy_(anchor);
    anchor_ = share(ctx.shared, anchor_);
    error_.copy_(error);
  }

 private:
  // Appends, per tensor of `part`, u32 frame size + the frame of its values (values_ in plan
  // order; each tensor's seed from its index among all, whatever the part).
  void encode_values(const IslandContext& ctx, const demo::PlanPart& part, std::vector<uint8_t>& message) const {
    int64_t at_k = part.first;
    for (size_t i = 0; i < part.plans.size(); ++i) {
      const size_t t = part.first_plan + i;
      const int64_t count = part.plans[i].sent();
      const size_t size_at = message.size();
      bytes::Writer(message).u32(0);
      const uint64_t seed = (static_cast<uint64_t>(round_ + 1) << 40) ^ (static_cast<uint64_t>(ctx.island) << 20) ^ t;
      ctx.codec->encode(values_.narrow(0, at_k, count), message, seed);
      bytes::put_at<uint32_t>(message.data(), size_at, static_cast<uint32_t>(message.size() - size_at - 4));
      at_k += count;
    }
  }

  // The inverse of encode_values into decoded_ (at the part's values); kCorrupt for any
  // malformed part.
  Status decode_values(const IslandContext& ctx, const demo::PlanPart& part, const uint8_t* in, size_t size) {
    bytes::Reader r(in, size, "sparseloco message");
    int64_t at_k = part.first;
    for (const auto& p : part.plans) {
      const uint32_t frame = r.u32("frame size");
      const uint8_t* body = r.take(frame, "frame");
      if (!r.ok()) return corrupt(r.error());
      at::Tensor out = decoded_.narrow(0, at_k, p.sent());  // a view: decode writes decoded_
      if (Status s = ctx.codec->decode(body, frame, out); !s.is_ok()) return s;
      at_k += p.sent();
    }
    if (!r.done()) return corrupt("sparseloco message: bytes after the last frame");
    return Status::ok();
  }

  // dst[tile position of value i] += sign * decoded[i] for the part's values and idx_,
  // counting the contributors of each position when `count`.
  void scatter(const demo::PlanPart& part, const at::Tensor& decoded, at::Tensor& dst, float sign, bool count) {
    const float* dv = decoded.data_ptr<float>();
    float* d = dst.data_ptr<float>();
    int64_t i = part.first;
    for (const auto& p : part.plans) {
      for (int64_t b = 0; b < p.blocks; ++b) {
        const int64_t base = p.offset + b * p.block_size();
        for (int64_t j = 0; j < p.k; ++j, ++i) {
          const int64_t pos = base + idx_[static_cast<size_t>(i)];
          d[pos] += sign * dv[i];
          if (count) count_[static_cast<size_t>(pos)] += 1;
        }
      }
    }
  }

  AlgorithmOptions options_;
  SparseLocoOptions own_;
  std::vector<demo::TensorPlan> plans_;
  at::Tensor anchor_;   // theta_g [N], on the parameters' device
  at::Tensor error_;    // e [N] CPU
  at::Tensor tiles_;    // [N] CPU: e in tile order, then the update U in parameter order
  at::Tensor sum_;      // [N] CPU: the gathered sum (tile order)
  at::Tensor values_;   // [K] CPU: this island's selected values
  at::Tensor decoded_;  // [K] CPU: one message's values as decoded
  std::vector<uint32_t> idx_;  // [K]: this island's indices, then one contributor's
  std::vector<float> count_;   // [N]: contributors of each position (mean_selected)
  int64_t round_ = 0;
  int64_t last_step_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_sparseloco(const AlgorithmOptions& options, int) {
  return std::make_unique<SparseLoCo>(options);
}

}  // namespace atl::algorithms
