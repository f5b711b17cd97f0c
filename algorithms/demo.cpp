// DeMo — Decoupled Momentum Optimization (Peng, Quesnelle, Kingma, arXiv 2411.19870), as the
// authors' reference bloc97/DeMo demo.py does it (docs/algorithms.md §4).
//
// Update rule, every step, per parameter tensor p with this island's gradient g (no gradient
// all-reduce; the island loop clips g first and sets lr):
//   p <- p (1 - lr wd)                              decoupled weight decay (train.weight_decay)
//   δ <- β δ + lr g                                 momentum residual (β = algorithm.decay)
//   C <- DCT(δ)                                     chunked orthonormal DCT-II, blocks n1 x n2
//   per block: the k largest |C| (k = algorithm.topk clamped to the block size), values v
//   q <- IDCT(those k coefficients); δ <- δ - q     error feedback: the rest stays local
//   allgather (indices, values) of every island
//   Q <- per coefficient, the mean of the values of the islands that sent it (0 if none)
//   p <- p - lr sign(IDCT(Q))                       signSGD; sign(0) = 0
// Every island applies the same update from the same gathered bytes, so the parameters stay
// bitwise identical. A lost island simply sends nothing from then on (the means are over the
// senders). With a lossy value codec (compression: fp16, int8, ...), q and the means use the
// values as decoded, so the quantisation error stays in δ.
// State per island: δ [N] float32 (CPU), scratch buffers [N] and [K], a step count (δ and
// the count are all a checkpoint holds).
// Bytes on the wire per step and island: one allgather of
//   [indices: sum over blocks of k * ceil(log2(n1 n2)) bits, padded to a byte]
//   [values: one codec frame of the K = sum of k over blocks values (raw fp32: 4 K bytes)]
// sent to W - 1 peers and W - 1 such messages received (transport framing counted as well).
// An island whose ranks shard the exchange (islands.shard_exchange, docs/ranks.md) cuts the
// message in parts of whole tensors (plan_parts), each [indices][frame], part s gathered by
// rank s: the same values, one frame header more per part.
// All tensor work runs on the CPU, whatever the parameters' device (the update is copied
// over), so replicas and the simulator agree bitwise.
#include "algorithms/demo.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "algorithms/builtin.h"
#include "algorithms/exchange.h"
#include "compression/dct.h"

namespace atl::algorithms {
namespace demo {
namespace {

int index_bits(int64_t block_size) {
  int b = 0;
  while ((int64_t{1} << b) < block_size) ++b;
  return b;
}

// C_n [n, n] (C[f, j]), a view of the process-wide cache of compression/dct.h.
at::Tensor basis(int64_t n) {
  return at::from_blob(const_cast<float*>(compression::dct_matrix(n)), {n, n}, at::kFloat);
}

uint32_t magnitude_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u & 0x7fffffffu;
}

}  // namespace

std::vector<TensorPlan> plan(const std::vector<ParamRange>& layout, int64_t n, int64_t chunk, int64_t topk) {
  std::vector<ParamRange> ranges = layout;
  if (ranges.empty()) ranges.push_back({0, n, -1, {}, 0});
  std::vector<TensorPlan> plans;
  for (const ParamRange& r : ranges) {
    TensorPlan p;
    p.offset = r.offset;
    if (r.shape.size() >= 2) {
      p.two_d = true;
      p.rows = r.shape[0];
      p.cols = r.numel / std::max<int64_t>(1, p.rows);
      p.n1 = compression::dct_divisor_chunk(p.rows, chunk);
    } else {
      p.rows = 1;
      p.cols = r.numel;
      p.n1 = 1;
    }
    TORCH_CHECK(p.rows * p.cols == r.numel && r.numel > 0, "demo: parameter at offset ", r.offset,
                " has a shape that does not match its ", r.numel, " elements");
    p.n2 = compression::dct_divisor_chunk(p.cols, chunk);
    p.blocks = (p.rows / p.n1) * (p.cols / p.n2);
    p.k = std::clamp<int64_t>(topk, 1, p.block_size());
    p.bits = index_bits(p.block_size());
    plans.push_back(p);
  }
  return plans;
}

size_t packed_index_bytes(const std::vector<TensorPlan>& plans) {
  uint64_t bits = 0;
  for (const auto& p : plans) bits += static_cast<uint64_t>(p.sent()) * static_cast<uint64_t>(p.bits);
  return static_cast<size_t>((bits + 7) / 8);
}

void pack_indices(const std::vector<TensorPlan>& plans, const uint32_t* idx, std::vector<uint8_t>& out) {
  uint64_t acc = 0;  // pending bits, least significant first
  int have = 0;
  for (const auto& p : plans) {
    const int64_t count = p.sent();
    for (int64_t i = 0; i < count; ++i, ++idx) {
      acc |= static_cast<uint64_t>(*idx) << have;
      have += p.bits;
      while (have >= 8) {
        out.push_back(static_cast<uint8_t>(acc & 0xff));
        acc >>= 8;
        have -= 8;
      }
    }
  }
  if (have > 0) out.push_back(static_cast<uint8_t>(acc & 0xff));
}

Status unpack_indices(const std::vector<TensorPlan>& plans, const uint8_t* in, size_t size, uint32_t* idx) {
  if (size != packed_index_bytes(plans)) return corrupt("demo message: index section has the wrong size");
  uint64_t acc = 0;
  int have = 0;
  size_t pos = 0;
  for (const auto& p : plans) {
    const uint64_t mask = (uint64_t{1} << p.bits) - 1;
    for (int64_t b = 0; b < p.blocks; ++b) {
      for (int64_t i = 0; i < p.k; ++i, ++idx) {
        while (have < p.bits) {
          acc |= static_cast<uint64_t>(in[pos++]) << have;
          have += 8;
        }
        *idx = static_cast<uint32_t>(acc & mask);
        acc >>= p.bits;
        have -= p.bits;
        if (*idx >= p.block_size()) return corrupt("demo message: index outside its block");
        if (i > 0 && *idx <= idx[-1]) return corrupt("demo message: indices of a block not ascending");
      }
    }
  }
  if (acc != 0 || pos != size) return corrupt("demo message: nonzero index padding");
  return Status::ok();
}

void forward(const TensorPlan& p, const at::Tensor& x, at::Tensor& y) {
  const int64_t a = p.rows / p.n1, b = p.cols / p.n2;
  if (p.two_d) {
    // [A, n1, B, n2] -> [A, B, n1, n2]; each block X -> C1 X C2^T
    const at::Tensor blocks = x.view({a, p.n1, b, p.n2}).permute({0, 2, 1, 3});
    y.view({a, b, p.n1, p.n2}).copy_(at::matmul(at::matmul(basis(p.n1), blocks), basis(p.n2).t()));
  } else {
    y.view({b, p.n2}).copy_(at::matmul(x.view({b, p.n2}), basis(p.n2).t()));
  }
}

void inverse(const TensorPlan& p, const at::Tensor& y, at::Tensor& x) {
  const int64_t a = p.rows / p.n1, b = p.cols / p.n2;
  if (p.two_d) {
    // each block Y -> C1^T Y C2, then [A, B, n1, n2] -> [A, n1, B, n2]
    const at::Tensor blocks = at::matmul(at::matmul(basis(p.n1).t(), y.view({a, b, p.n1, p.n2})), basis(p.n2));
    x.view({a, p.n1, b, p.n2}).copy_(blocks.permute({0, 2, 1, 3}));
  } else {
    x.view({b, p.n2}).copy_(at::matmul(y.view({b, p.n2}), basis(p.n2)));
  }
}

void block_topk(const float* x, int64_t n, int64_t k, uint32_t* idx) {
  if (k >= n) {
    std::iota(idx, idx + n, 0u);
    return;
  }
  thread_local std::vector<uint32_t> order;
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0u);
  // A strict total order: larger magnitude first, then lower index.
  const auto before = [x](uint32_t i, uint32_t j) {
    const uint32_t a = magnitude_bits(x[i]), b = magnitude_bits(x[j]);
    return a != b ? a > b : i < j;
  };
  std::nth_element(order.begin(), order.begin() + k, order.end(), before);
  std::copy(order.begin(), order.begin() + k, idx);
  std::sort(idx, idx + k);
}

void select_blocks(const std::vector<TensorPlan>& plans, const float* x, uint32_t* idx, float* values) {
  int64_t at_k = 0;
  for (const auto& p : plans) {
    for (int64_t b = 0; b < p.blocks; ++b) {
      const int64_t base = p.offset + b * p.block_size();
      block_topk(x + base, p.block_size(), p.k, idx + at_k);
      for (int64_t i = 0; i < p.k; ++i) values[at_k + i] = x[base + idx[at_k + i]];
      at_k += p.k;
    }
  }
}

std::vector<PlanPart> plan_parts(const std::vector<TensorPlan>& plans, int shards) {
  const size_t n = plans.size();
  const size_t parts = shards > 1 && n >= static_cast<size_t>(shards) ? static_cast<size_t>(shards) : 1;
  std::vector<int64_t> before(n + 1, 0);  // values sent by the plans before plan i
  for (size_t i = 0; i < n; ++i) before[i + 1] = before[i] + plans[i].sent();
  std::vector<size_t> start(parts + 1, 0);
  start[parts] = n;
  for (size_t s = 1; s < parts; ++s) {
    const int64_t target = before[n] * static_cast<int64_t>(s) / static_cast<int64_t>(parts);
    size_t b = static_cast<size_t>(std::lower_bound(before.begin(), before.begin() + static_cast<std::ptrdiff_t>(n), target) -
                                   before.begin());
    start[s] = std::clamp(b, start[s - 1] + 1, n - (parts - s));
  }
  std::vector<PlanPart> out(parts);
  for (size_t s = 0; s < parts; ++s) {
    PlanPart& q = out[s];
    q.plans.assign(plans.begin() + static_cast<std::ptrdiff_t>(start[s]), plans.begin() + static_cast<std::ptrdiff_t>(start[s + 1]));
    q.first_plan = start[s];
    q.first = before[start[s]];
    q.values = before[start[s + 1]] - q.first;
  }
  return out;
}

void Demo::setup(IslandContext& ctx) {
  if (auto problem = algorithms::codec_problem(name(), ctx.codec->stages())) throw UserError("compression: " + *problem);
  params_ = ctx.params;
  const int64_t n = ctx.params.numel();
  plans_ = plan(ctx.layout, n, own_.chunk, own_.topk);
  int64_t sent = 0;
  for (const auto& p : plans_) sent += p.sent();
  const auto cpu = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
  delta_ = at::zeros({n}, cpu);
  coef_ = at::zeros({n}, cpu);
  work_ = at::zeros({n}, cpu);
  values_ = at::zeros({sent}, cpu);
  decoded_ = at::zeros({sent}, cpu);
  idx_.assign(static_cast<size_t>(sent), 0);
  count_.assign(static_cast<size_t>(n), 0.0f);
}

AlgorithmState Demo::export_state() const { return state().only({"round"}); }

void Demo::import_state(IslandContext&, const AlgorithmState& state) {
  steps_ = state.integer("round");  // δ stays zero (see demo.h)
}

AlgorithmCheckpoint Demo::state() const { return AlgorithmCheckpoint().add("round", steps_).add("residual", delta_); }

void Demo::load(IslandContext&, const AlgorithmCheckpoint& state) {
  const at::Tensor& residual = state.tensor("residual");
  TORCH_CHECK(residual.defined() && residual.numel() == delta_.numel(), "demo checkpoint: expected the residual of ",
              delta_.numel(), " elements");
  at::NoGradGuard no_grad;
  steps_ = state.integer("round");
  delta_.copy_(residual);
}

void Demo::inner_step(IslandContext& ctx, int64_t step) {
  at::NoGradGuard no_grad;
  const double lr = ctx.lr;
  const at::Tensor g = ctx.grads.device().is_cpu() ? ctx.grads : ctx.grads.to(at::kCPU);
  if (options_.weight_decay != 0) ctx.params.mul_(1.0 - lr * options_.weight_decay);
  if (own_.decay != 1) delta_.mul_(own_.decay);
  delta_.add_(g, lr);

  // This island's fast components: per block, the k largest DCT coefficients of δ.
  for (const auto& p : plans_) {
    at::Tensor y = coef_.narrow(0, p.offset, p.numel());
    forward(p, delta_.narrow(0, p.offset, p.numel()), y);
  }
  select_blocks(plans_, coef_.data_ptr<float>(), idx_.data(), values_.data_ptr<float>());
  // The message, in parts of whole tensors when the group shards the exchange (one otherwise).
  const std::vector<PlanPart> parts = plan_parts(plans_, ctx.group->shards());
  std::vector<std::vector<uint8_t>> messages(parts.size());
  std::vector<size_t> index_bytes(parts.size());
  for (size_t q = 0; q < parts.size(); ++q) {
    const PlanPart& part = parts[q];
    std::vector<uint8_t>& message = messages[q];
    message.reserve(packed_index_bytes(part.plans) + ctx.codec->max_encoded_size(part.values));
    pack_indices(part.plans, idx_.data() + part.first, message);
    index_bytes[q] = message.size();
    ctx.codec->encode(values_.narrow(0, part.first, part.values), message,
                      (static_cast<uint64_t>(step) * 65536u + static_cast<uint64_t>(ctx.island)) + (static_cast<uint64_t>(q) << 48));
  }

  // What the others will decode of this island's values, then q = its inverse DCT: δ -= q.
  const at::Tensor* own = &values_;
  if (!ctx.codec->lossless()) {
    for (size_t q = 0; q < parts.size(); ++q) {
      const std::vector<uint8_t>& message = messages[q];
      at::Tensor out = decoded_.narrow(0, parts[q].first, parts[q].values);  // a view: decode writes decoded_
      const Status s = ctx.codec->decode(message.data() + index_bytes[q], message.size() - index_bytes[q], out);
      TORCH_CHECK(s.is_ok(), "demo: own frame does not decode: ", s.message());
    }
    own = &decoded_;
  }
  float* cw = coef_.data_ptr<float>();
  coef_.zero_();
  {
    const float* ov = own->data_ptr<float>();
    int64_t i = 0;
    for (const auto& p : plans_) {
      for (int64_t b = 0; b < p.blocks; ++b) {
        const int64_t base = p.offset + b * p.block_size();
        for (int64_t j = 0; j < p.k; ++j, ++i) cw[base + idx_[static_cast<size_t>(i)]] = ov[i];
      }
    }
  }
  for (const auto& p : plans_) {
    at::Tensor x = work_.narrow(0, p.offset, p.numel());
    inverse(p, coef_.narrow(0, p.offset, p.numel()), x);
  }
  delta_.sub_(work_);

  // Exchange, then per coefficient the mean over the islands that sent it.
  const RoundMeter meter(*ctx.group);
  std::vector<std::vector<std::vector<uint8_t>>> gathered;
  const transport::CollectiveResult result = ctx.group->allgather_parts(std::move(messages), &gathered)->wait();
  require_usable(result, ctx, "demo allgather", step);
  coef_.zero_();
  touched_.clear();
  for (size_t q = 0; q < parts.size(); ++q) {
    const PlanPart& part = parts[q];
    uint32_t* idx = idx_.data() + part.first;
    at::Tensor decoded = decoded_.narrow(0, part.first, part.values);
    for (size_t m = 0; m < gathered[q].size(); ++m) {
      const auto& bytes = gathered[q][m];
      const size_t ib = index_bytes[q];
      Status s = bytes.size() >= ib ? unpack_indices(part.plans, bytes.data(), ib, idx)
                                    : corrupt("demo message: shorter than its indices");
      if (s.is_ok()) s = ctx.codec->decode(bytes.data() + ib, bytes.size() - ib, decoded);
      if (!s.is_ok()) {
        throw StatusError("island " + std::to_string(ctx.island) + ": demo message of island " +
                              std::to_string(result.contributors[m]) + " at step " + std::to_string(step),
                          s);
      }
      const float* dv = decoded.data_ptr<float>();
      int64_t i = 0;
      for (const auto& p : part.plans) {
        for (int64_t b = 0; b < p.blocks; ++b) {
          const int64_t base = p.offset + b * p.block_size();
          for (int64_t j = 0; j < p.k; ++j, ++i) {
            const int64_t pos = base + idx[i];
            if (count_[static_cast<size_t>(pos)] == 0) touched_.push_back(pos);
            cw[pos] += dv[i];
            count_[static_cast<size_t>(pos)] += 1;
          }
        }
      }
    }
  }
  for (int64_t pos : touched_) {
    cw[pos] /= count_[static_cast<size_t>(pos)];
    count_[static_cast<size_t>(pos)] = 0;
  }
  for (const auto& p : plans_) {
    at::Tensor x = work_.narrow(0, p.offset, p.numel());
    inverse(p, coef_.narrow(0, p.offset, p.numel()), x);
  }
  at::Tensor direction = work_.sign();
  if (direction.device() != ctx.params.device()) direction = direction.to(ctx.params.device());
  ctx.params.add_(direction, -lr);

  ++steps_;
  if (ctx.on_round) {
    ctx.on_round(meter.finish(*ctx.group, steps_, step, static_cast<int>(result.contributors.size()),
                              work_.norm().item<double>()));
  }
}

}  // namespace demo

std::unique_ptr<Algorithm> make_demo(const AlgorithmOptions& options, int) {
  return std::make_unique<demo::Demo>(options);
}

}  // namespace atl::algorithms
