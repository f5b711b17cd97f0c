// FedAvg: client side (an Algorithm) and server side (an OuterServer). See fedavg.h.
#include "algorithms/fedavg.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <numeric>

#include "algorithms/builtin.h"
#include "algorithms/outer_optimizer.h"
#include "algorithms/exchange.h"
#include "src/base/hash.h"

namespace atl::algorithms {
namespace fedavg {

int clients_per_round(double fraction, int clients) {
  const int m = static_cast<int>(std::floor(fraction * clients + 1e-9));
  return std::clamp(m, 1, clients);
}

std::vector<int> select_clients(uint64_t seed, int64_t round, int clients, int m) {
  std::vector<int> all(static_cast<size_t>(clients));
  std::iota(all.begin(), all.end(), 0);
  uint64_t state = seed * 0x2545f4914f6cdd1dULL + static_cast<uint64_t>(round) + 0x51ed27ULL;
  // Partial Fisher-Yates: the first m entries are a uniform sample without replacement.
  for (int i = 0; i < m; ++i) {
    const int j = i + static_cast<int>(splitmix64_next(state) % static_cast<uint64_t>(clients - i));
    std::swap(all[i], all[j]);
  }
  all.resize(static_cast<size_t>(m));
  std::sort(all.begin(), all.end());
  return all;
}

int64_t local_steps(const AlgorithmOptions& options, int64_t shard_size) {
  if (options.local_steps > 0) return options.local_steps;
  const int64_t b = std::max(1, options.batch_size);
  return options.local_epochs * ((shard_size + b - 1) / b);
}

}  // namespace fedavg

namespace {

class FedAvgClient final : public Algorithm {
 public:
  FedAvgClient(const AlgorithmOptions& options, int island)
      : options_(options), island_(island), feedback_(options.error_feedback) {}

  std::string name() const override { return "fedavg"; }
  bool global_on_server() const override { return true; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    global_ = ctx.params.detach().clone();
    delta_ = at::empty({ctx.params.numel()}, ctx.params.options().device(at::kCPU));
    const int m = fedavg::clients_per_round(options_.client_fraction, options_.islands);
    const int64_t u = fedavg::local_steps(options_, ctx.shard_size);
    int64_t step = 0;
    for (int64_t t = 0; t < options_.rounds; ++t) {
      auto chosen = fedavg::select_clients(options_.seed, t, options_.islands, m);
      if (std::binary_search(chosen.begin(), chosen.end(), island_)) {
        plan_.push_back({t, step + 1, step + u});
        step += u;
      }
    }
    steps_ = step;
  }

  int64_t planned_steps(int64_t) override { return steps_; }

  void before_step(IslandContext& ctx, int64_t step) override {
    if (next_ >= plan_.size() || plan_[next_].first_step != step) return;
    at::NoGradGuard no_grad;
    meter_ = RoundMeter(*ctx.group);
    at::Tensor incoming = at::empty_like(delta_);
    // The global model travels uncompressed; the codec applies to the clients' updates.
    auto result = ctx.group->pull(static_cast<uint64_t>(plan_[next_].round), incoming, raw_)->wait();
    require_usable(result, ctx, "fedavg pull", step, /*survivors_ok=*/false);
    global_.copy_(incoming);
    ctx.params.copy_(global_);
  }

  void after_inner_step(IslandContext& ctx, int64_t step) override {
    if (next_ >= plan_.size() || plan_[next_].last_step != step) return;
    at::NoGradGuard no_grad;
    const Participation p = plan_[next_++];
    delta_.copy_(global_ - ctx.params);
    at::Tensor transmitted = feedback_.compensate(delta_, *ctx.codec);
    auto result = ctx.group->push(static_cast<uint64_t>(p.round), delta_, *ctx.codec,
                                  static_cast<double>(std::max<int64_t>(ctx.shard_size, 1)),
                                  transmitted)->wait();
    require_usable(result, ctx, "fedavg push", step, /*survivors_ok=*/false);
    feedback_.update();
    if (ctx.on_round) ctx.on_round(meter_.finish(*ctx.group, p.round + 1, step, 1, delta_.norm().item<double>()));
  }

  at::Tensor global_params() const override { return global_; }

 private:
  struct Participation {
    int64_t round;
    int64_t first_step;
    int64_t last_step;
  };
  AlgorithmOptions options_;
  int island_;
  std::vector<Participation> plan_;
  size_t next_ = 0;
  int64_t steps_ = 0;
  at::Tensor global_;
  at::Tensor delta_;
  compression::Pipeline raw_;      // pulls of the global model: lossless fp32
  Feedback feedback_;
  RoundMeter meter_;
};

// Aggregates the selected clients' deltas of the current round. They are summed in client-id
// order once all have arrived, so the result does not depend on arrival order (the
// simulator and a real run give bitwise the same model).
class FedAvgServer final : public transport::OuterServer {
 public:
  FedAvgServer(const AlgorithmOptions& options, const at::Tensor& initial,
               std::function<void(int64_t, const at::Tensor&)> on_round)
      : options_(options), outer_(options.outer), on_round_(std::move(on_round)) {
    global_ = initial.detach().to(at::kCPU).clone();
    sum_ = at::zeros_like(global_);
    m_ = fedavg::clients_per_round(options.client_fraction, options.islands);
    expected_ = fedavg::select_clients(options_.seed, 0, options_.islands, m_);
  }

  void on_push(int island, uint64_t tag, const at::Tensor& payload, double weight) override {
    at::NoGradGuard no_grad;
    TORCH_CHECK(static_cast<int64_t>(tag) == round_, "fedavg server: push for round ", tag,
                " while in round ", round_);
    TORCH_CHECK(std::binary_search(expected_.begin(), expected_.end(), island),
                "fedavg server: island ", island, " was not selected for round ", round_);
    TORCH_CHECK(received_.count(island) == 0, "fedavg server: island ", island, " pushed twice in round ", round_);
    received_[island] = {payload.clone(), weight};
    if (received_.size() < expected_.size()) return;
    double weight_sum = 0;
    for (auto& [id, contribution] : received_) {
      sum_.add_(contribution.first, contribution.second);
      weight_sum += contribution.second;
    }
    sum_.div_(weight_sum);
    outer_.step(global_, sum_);
    sum_.zero_();
    received_.clear();
    ++round_;
    if (round_ < options_.rounds) {
      expected_ = fedavg::select_clients(options_.seed, round_, options_.islands, m_);
    }
    if (on_round_) on_round_(round_, global_);
  }

  std::optional<at::Tensor> on_pull(int, uint64_t tag) override {
    if (static_cast<int64_t>(tag) != round_) return std::nullopt;
    return global_;
  }

 private:
  AlgorithmOptions options_;
  OuterOptimizer outer_;
  std::function<void(int64_t, const at::Tensor&)> on_round_;
  at::Tensor global_;
  at::Tensor sum_;
  std::map<int, std::pair<at::Tensor, double>> received_;  // this round's deltas by client id
  int m_ = 1;
  int64_t round_ = 0;
  std::vector<int> expected_;
};

}  // namespace

std::unique_ptr<Algorithm> make_fedavg(const AlgorithmOptions& options, int island) {
  return std::make_unique<FedAvgClient>(options, island);
}

std::unique_ptr<transport::OuterServer> make_fedavg_server(
    const AlgorithmOptions& options, const at::Tensor& initial,
    std::function<void(int64_t, const at::Tensor&)> on_round) {
  return std::make_unique<FedAvgServer>(options, initial, std::move(on_round));
}

}  // namespace atl::algorithms
