// FedAvg: client side (an Algorithm) and server side (an OuterServer). See fedavg.h.
#include "algorithms/fedavg.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <limits>
#include <numeric>

#include "algorithms/builtin.h"
#include "algorithms/outer_optimizer.h"
#include "algorithms/exchange.h"
#include "src/base/hash.h"

// fedavg's client selection and local steps (fedavg.h) are in algorithms/planning.cpp.
namespace atl::algorithms {
namespace {

class FedAvgClient final : public Algorithm {
 public:
  FedAvgClient(const AlgorithmOptions& options, int island)
      : options_(options), own_(options.get<FedAvgOptions>()), island_(island), feedback_(own_.error_feedback) {}

  std::string name() const override { return "fedavg"; }
  bool global_on_server() const override { return true; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    global_ = ctx.params.detach().clone();
    delta_ = at::empty({ctx.params.numel()}, ctx.params.options().device(at::kCPU));
    const int m = fedavg::clients_per_round(own_.client_fraction, options_.islands);
    const int64_t u = fedavg::local_steps(options_, ctx.shard_size);
    int64_t step = 0;
    for (int64_t t = 0; t < own_.rounds; ++t) {
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

  // Checkpoints at server rounds (docs/checkpoints.md): a client is at the cut at the
  // boundaries where its next action is a pull. State: "participations" (done, next_),
  // "global" (the pulled global model), "feedback.residual" (undefined before a lossy push).
  double checkpoint_position(int64_t step) const override {
    if (next_ >= plan_.size() || plan_[next_].first_step != step + 1) return -1;
    return static_cast<double>(plan_[next_].round);
  }
  AlgorithmCheckpoint state() const override {
    return AlgorithmCheckpoint()
        .add("participations", static_cast<int64_t>(next_))
        .add("global", global_)
        .add("feedback.residual", feedback_.residual());
  }
  void load(IslandContext&, const AlgorithmCheckpoint& state) override {
    const int64_t next = state.integer("participations");
    const at::Tensor& global = state.tensor("global");
    const at::Tensor& residual = state.tensor("feedback.residual");
    TORCH_CHECK(next >= 0 && global.defined() && global.numel() == global_.numel(), "fedavg checkpoint: malformed state");
    at::NoGradGuard no_grad;
    next_ = static_cast<size_t>(next);
    global_.copy_(global);
    feedback_.load(residual);
  }

 private:
  struct Participation {
    int64_t round;
    int64_t first_step;
    int64_t last_step;
  };
  AlgorithmOptions options_;
  FedAvgOptions own_;
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

// The client id in an entry name `prefix` + id + `suffix` of the server's state ("lost.3",
// "result.3.weight"); -1 for a name of another form. A malformed id is a c10::Error.
int client_in(const std::string& name, const std::string& prefix, const std::string& suffix, int clients) {
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string id = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  TORCH_CHECK(id.find_first_not_of("0123456789") == std::string::npos && id.size() < 9 && std::stoi(id) < clients,
              "fedavg server checkpoint: no client '", id, "' (entry '", name, "')");
  return std::stoi(id);
}

// Aggregates the selected clients' deltas of the current round. They are summed in client-id
// order once the round closes, so the result does not depend on arrival order (the
// simulator and a real run give bitwise the same model).
//
// A round opens when the previous one closes (round 0: at the first on_time()). It closes
// when every selected client has delivered or was lost (on_member_lost), or at its deadline
// (algorithm.round_timeout_s after it opened, seen through on_time()), with what it has:
// fewer than min_clients results skip it (model unchanged). Results of a closed round are
// ignored (accepts() is false for them), and a pull of a closed round is answered with the
// newest model, so a late client goes on with its plan and nobody waits for it.
class FedAvgServer final : public transport::OuterServer {
 public:
  FedAvgServer(const AlgorithmOptions& options, const at::Tensor& initial,
               std::function<void(const ServerRound&)> on_round)
      : options_(options), own_(options.get<FedAvgOptions>()), outer_(own_.outer), on_round_(std::move(on_round)) {
    global_ = initial.detach().to(at::kCPU).clone();
    sum_ = at::zeros_like(global_);
    m_ = fedavg::clients_per_round(own_.client_fraction, options.islands);
    if (own_.rounds > 0) expected_ = fedavg::select_clients(options_.seed, 0, options_.islands, m_);
  }

  void on_push(int island, uint64_t tag, const at::Tensor& payload, double weight) override {
    at::NoGradGuard no_grad;
    TORCH_CHECK(static_cast<int64_t>(tag) <= round_, "fedavg server: push for round ", tag,
                " while in round ", round_);
    if (!accepts(island, tag)) return;  // its round closed without it (late), or it was lost
    TORCH_CHECK(std::binary_search(expected_.begin(), expected_.end(), island),
                "fedavg server: island ", island, " was not selected for round ", round_);
    TORCH_CHECK(received_.count(island) == 0, "fedavg server: island ", island, " pushed twice in round ", round_);
    received_[island] = {payload.clone(), weight};
    if (complete()) close(closing_time(now_));
  }

  std::optional<at::Tensor> on_pull(int, uint64_t tag) override {
    if (static_cast<int64_t>(tag) > round_) return std::nullopt;
    return global_;  // this round's model, or (a round that closed without this client) the newest
  }

  bool on_member_lost(int island, double at_s) override {
    if (lost_.count(island) || round_ >= own_.rounds) return false;
    lost_[island] = at_s;
    if (std::isnan(open_at_)) open_at_ = at_s;
    if (!std::binary_search(expected_.begin(), expected_.end(), island) || received_.count(island)) return false;
    if (!complete()) return false;
    close(closing_time(now_));
    return true;
  }

  double on_time(double now_s) override {
    now_ = std::max(now_, now_s);
    if (std::isnan(open_at_)) open_at_ = now_s;
    double changed = -1;
    while (now_s >= next_deadline()) {
      changed = next_deadline();
      close(changed);
    }
    return changed;
  }

  double changed_at() const override { return changed_at_; }

  // The state between messages. The simulator cuts its checkpoints between rounds (nothing
  // received in the open round); a real run's coordinator saves it after every push, with
  // the open round's results. Entries: "round", "open_at", "now", "changed_at" (reals),
  // "global", the outer optimizer's "outer.*", then per lost client (ascending id)
  // "lost.<id>" (real: when it was noticed), and per result of the open round (ascending id)
  // "result.<id>.weight" (real) and "result.<id>.delta" (tensor).
  State state() const override {
    State s;
    s.add("round", round_).add_real("open_at", open_at_).add_real("now", now_).add_real("changed_at", changed_at_);
    s.add("global", global_);
    outer_.save(s, "outer");
    for (const auto& [id, noticed] : lost_) s.add_real("lost." + std::to_string(id), noticed);
    for (const auto& [id, result] : received_) {
      s.add_real("result." + std::to_string(id) + ".weight", result.second);
      s.add("result." + std::to_string(id) + ".delta", result.first);
    }
    return s;
  }
  void load(const State& s) override {
    // Every entry read and checked before the state changes.
    std::map<int, double> lost;
    std::map<int, std::pair<at::Tensor, double>> received;
    for (const NamedState::Entry& e : s.entries()) {
      if (const int id = client_in(e.name, "lost.", "", options_.islands); id >= 0) {
        lost[id] = s.real(e.name);
      } else if (const int id = client_in(e.name, "result.", ".weight", options_.islands); id >= 0) {
        const at::Tensor& delta = s.tensor("result." + std::to_string(id) + ".delta");
        TORCH_CHECK(delta.defined() && delta.numel() == global_.numel(), "fedavg server checkpoint: malformed result");
        received[id] = {delta.to(at::kCPU, false, true), s.real(e.name)};
      }
    }
    const at::Tensor& global = s.tensor("global");
    TORCH_CHECK(global.defined() && global.numel() == global_.numel(), "fedavg server checkpoint: malformed state");
    const int64_t round = s.integer("round");
    const double open_at = s.real("open_at"), now = s.real("now"), changed_at = s.real("changed_at");
    outer_.load(s, "outer", at::kCPU);
    at::NoGradGuard no_grad;
    round_ = round;
    global_.copy_(global);
    open_at_ = open_at;
    now_ = now;
    changed_at_ = changed_at;
    lost_ = std::move(lost);
    received_ = std::move(received);
    expected_.clear();
    if (round_ < own_.rounds) expected_ = fedavg::select_clients(options_.seed, round_, options_.islands, m_);
  }

  double next_deadline() const override {
    if (own_.round_timeout_s <= 0 || round_ >= own_.rounds || std::isnan(open_at_))
      return std::numeric_limits<double>::infinity();
    return open_at_ + own_.round_timeout_s;
  }

 private:
  // A push of `tag` from `island` is used: its round is open and the island not lost.
  bool accepts(int island, uint64_t tag) const {
    return static_cast<int64_t>(tag) == round_ && round_ < own_.rounds && lost_.count(island) == 0;
  }

  // Every selected client of the open round has delivered or was lost.
  bool complete() const {
    for (int id : expected_)
      if (!received_.count(id) && !lost_.count(id)) return false;
    return true;
  }

  // When the open round, now complete, closes: at `now_s`, but not before the loss of each
  // client it is missing was noticed (the server cannot know it is gone before then).
  double closing_time(double now_s) const {
    double t = now_s;
    for (int id : expected_)
      if (auto it = lost_.find(id); it != lost_.end() && !received_.count(id)) t = std::max(t, it->second);
    return t;
  }

  // Closes the open round at `at_s` with the results it has; then closes each next round
  // whose every selected client is already lost.
  void close(double at_s) {
    do {
      ServerRound r;
      r.selected = static_cast<int>(expected_.size());
      for (int id : expected_) {
        if (received_.count(id)) r.delivered.push_back(id);
        else if (lost_.count(id)) r.lost.push_back(id);
        else r.late.push_back(id);
      }
      r.skipped = static_cast<int>(r.delivered.size()) < own_.min_clients;
      if (!r.skipped) {
        double weight_sum = 0;
        for (auto& [id, contribution] : received_) {
          sum_.add_(contribution.first, contribution.second);
          weight_sum += contribution.second;
        }
        sum_.div_(weight_sum);
        outer_.step(global_, sum_);
        sum_.zero_();
      }
      received_.clear();
      ++round_;
      open_at_ = at_s;
      changed_at_ = at_s;
      expected_.clear();
      if (round_ < own_.rounds) expected_ = fedavg::select_clients(options_.seed, round_, options_.islands, m_);
      r.round = round_;
      r.global = global_;
      r.at_s = at_s;
      if (on_round_) on_round_(r);
      if (round_ < own_.rounds && complete()) at_s = closing_time(at_s);
    } while (round_ < own_.rounds && complete());
  }

  AlgorithmOptions options_;
  FedAvgOptions own_;
  OuterOptimizer outer_;
  std::function<void(const ServerRound&)> on_round_;
  at::Tensor global_;
  at::Tensor sum_;
  std::map<int, std::pair<at::Tensor, double>> received_;  // this round's deltas by client id
  int m_ = 1;
  int64_t round_ = 0;
  std::vector<int> expected_;  // the clients selected for the open round, ascending
  std::map<int, double> lost_;  // clients the membership lost (never expected again) -> when
                                // the loss was noticed
  double open_at_ = NAN;        // when the open round opened (NaN: before the first on_time)
  double now_ = 0;              // the latest time on_time() was given
  double changed_at_ = -1;      // when the latest round closed (-1: none yet)
};

}  // namespace

std::unique_ptr<Algorithm> make_fedavg(const AlgorithmOptions& options, int island) {
  return std::make_unique<FedAvgClient>(options, island);
}

std::unique_ptr<transport::OuterServer> make_fedavg_server(
    const AlgorithmOptions& options, const at::Tensor& initial,
    std::function<void(const ServerRound&)> on_round) {
  return std::make_unique<FedAvgServer>(options, initial, std::move(on_round));
}

}  // namespace atl::algorithms
