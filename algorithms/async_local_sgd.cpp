// Asynchronous local-SGD (Liu et al., arXiv 2401.09135, Algorithms 2 and 3; docs/algorithms.md §5).
//
// Worker (an Algorithm per island), one task after another until its steps are done:
//   pull theta from the server; theta_start <- theta
//   run L local steps (DyLU: L = max(floor(speed / max_speed * H), min_local_steps); else H)
//   push g = theta_start - theta_end (through ctx.codec, error feedback for lossy codecs)
// Nobody waits for anybody: the server applies every pseudo-gradient when it arrives, so
// they are stale by however many arrivals happened since the worker's pull.
// Server (an OuterServer), per arrival g:
//   delayed_nesterov: DelayedNesterov (see async_local_sgd.h), buffer N, activation c,
//                     eps = outer_lr, beta = outer_momentum (outer_optimizer is not used)
//   naive:            theta <- OuterOpt(theta, g)   (one outer step per arrival)
// [impl choice] Grace window (grace_s > 0): after a push, the worker idles until
//   push time + grace_s (ctx.time) before it pulls. The simulator runs islands in
//   virtual-time order, so every push made within the window is applied before the pull,
//   and workers that finish close together restart from one model (the paper's batching).
// [impl choice] Island i runs floor(train.steps * speed_i / max_speed) steps in total, so
//   all islands stop at about the same virtual time; the last task may be shorter.
// Tags: a push carries the island's task number as its tag and the task's local steps as
//   its weight (the server counts applied local steps with it); pulls always get the
//   current model.
// State: worker: the pulled model [N], the pseudo-gradient buffer [N] (CPU), error-feedback
//   residual [N]; server: theta [N], DN momentum + buffer [N] each (naive: the outer
//   optimizer's state).
// Bytes per task: push N*b, pull N*4 (the model travels uncompressed).
#include "algorithms/async_local_sgd.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "algorithms/builtin.h"
#include "algorithms/exchange.h"
#include "algorithms/outer_optimizer.h"
#include "src/base/status.h"

namespace atl::algorithms {
// The planning rules of async_local_sgd.h (DyLU, step counts, dn_c) are in algorithms/planning.cpp.
namespace async_local_sgd {

DelayedNesterov::DelayedNesterov(double lr, double momentum, int buffer, double c)
    : lr_(lr), beta_(momentum), c_(c), n_(buffer) {
  TORCH_CHECK(n_ >= 1, "delayed nesterov: buffer size must be >= 1");
}

void DelayedNesterov::apply(at::Tensor& theta, const at::Tensor& g) {
  at::NoGradGuard no_grad;
  if (!m_.defined()) {
    m_ = at::zeros_like(g);
    d_ = at::zeros_like(g);
  }
  const double n = n_;
  d_.add_(g);
  if ((arrivals_ + 1) % n_ == 0) {
    m_.mul_(beta_).add_(d_, 1.0 / n);
    theta.sub_(m_, lr_ * (1 - c_ * n + c_) * beta_).sub_(g, lr_ / n);
    d_.zero_();
  } else {
    theta.sub_(m_, lr_ * c_ * beta_).sub_(g, lr_ / n);
  }
  ++arrivals_;
}

void DelayedNesterov::load(int64_t arrivals, const at::Tensor& m, const at::Tensor& d) {
  arrivals_ = arrivals;
  m_ = m.defined() ? m.clone() : m;
  d_ = d.defined() ? d.clone() : d;
}

}  // namespace async_local_sgd

namespace {

class AsyncWorker final : public Algorithm {
 public:
  AsyncWorker(const AlgorithmOptions& options, int island)
      : options_(options), grace_s_(options.get<AsyncLocalSgdOptions>().grace_s), island_(island), task_(async_local_sgd::task_steps(options, island)),
        steps_(async_local_sgd::island_steps(options, island, options.train_steps)),
        feedback_(options.get<AsyncLocalSgdOptions>().error_feedback) {
    if (auto problem = async_local_sgd::check_dn_c(options))
      throw UserError("async_local_sgd: " + problem->key + ": " + problem->message);
  }

  std::string name() const override { return "async_local_sgd"; }
  bool global_on_server() const override { return true; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    TORCH_CHECK(grace_s_ == 0 || ctx.time != nullptr,
                "async_local_sgd: a grace window needs a time source");
    time_ = ctx.time;
    global_ = ctx.params.detach().clone();
    delta_ = at::empty({ctx.params.numel()}, ctx.params.options().device(at::kCPU));
  }

  int64_t planned_steps(int64_t configured) override {
    steps_ = async_local_sgd::island_steps(options_, island_, configured);
    return steps_;
  }

  // A task that ended at the previous step is pushed here, at the same virtual time as its
  // last step (nothing moves the clock in between), so that every server interaction falls
  // at a step boundary, where a checkpoint can be cut (docs/checkpoints.md).
  void before_step(IslandContext& ctx, int64_t step) override {
    push_pending(ctx);
    if ((step - 1) % task_ != 0) return;
    at::NoGradGuard no_grad;
    if (ctx.before_server_call) ctx.before_server_call();
    if (pushed_at_) ctx.time->sleep_until_s(*pushed_at_ + grace_s_);
    meter_ = RoundMeter(*ctx.group);
    at::Tensor incoming = at::empty_like(delta_);
    auto result = ctx.group->pull(static_cast<uint64_t>(tasks_), incoming, raw_)->wait();
    require_usable(result, ctx, "async_local_sgd pull", step, /*survivors_ok=*/false);
    global_.copy_(incoming);
    ctx.params.copy_(global_);
  }

  void after_inner_step(IslandContext&, int64_t step) override {
    if (step % task_ != 0 && step != steps_) return;
    pending_steps_ = step - (step - 1) / task_ * task_;
    pending_step_ = step;
  }

  // The last task's push.
  void finish(IslandContext& ctx) override { push_pending(ctx); }

  at::Tensor global_params() const override { return global_; }

  // Checkpoints are cut in virtual time, before server interactions (docs/checkpoints.md
  // "async_local_sgd: a cut in virtual time"). State: "tasks" (pushed), "pending_steps"
  // (local steps of the task awaiting its push; 0: none), "pending_step" (the step that
  // ended it), "pushed" (1: a grace window's last push time "pushed_at", a real, holds),
  // the round's byte counters at its pull "round.sent", ".received", ".raw_sent" and its
  // "round.members", "global" (the pulled global model), "feedback.residual" (undefined
  // before a lossy push).
  double checkpoint_position(int64_t step) const override {
    if (time_ == nullptr) return -1;
    if (pending_steps_ > 0) return time_->now_s();                       // the push, now
    if (step >= steps_ || step % task_ != 0) return -1;                  // compute comes first
    return pushed_at_ ? std::max(time_->now_s(), *pushed_at_ + grace_s_) : time_->now_s();  // the pull
  }
  AlgorithmCheckpoint state() const override {
    AlgorithmCheckpoint s;
    const transport::ByteCounters& b = meter_.before();
    s.add("tasks", tasks_).add("pending_steps", pending_steps_).add("pending_step", pending_step_);
    s.add("pushed", int64_t{pushed_at_ ? 1 : 0}).add_real("pushed_at", pushed_at_.value_or(0.0));
    s.add("round.sent", static_cast<int64_t>(b.sent))
        .add("round.received", static_cast<int64_t>(b.received))
        .add("round.raw_sent", static_cast<int64_t>(b.raw_sent))
        .add("round.members", int64_t{meter_.members()});
    s.add("global", global_).add("feedback.residual", feedback_.residual());
    return s;
  }
  void load(IslandContext&, const AlgorithmCheckpoint& state) override {
    auto n = [&](const char* name) { return state.integer(name); };
    const at::Tensor& global = state.tensor("global");
    TORCH_CHECK(global.defined() && global.numel() == global_.numel(), "async_local_sgd checkpoint: malformed state");
    const transport::ByteCounters before{static_cast<uint64_t>(n("round.sent")), static_cast<uint64_t>(n("round.received")),
                                         static_cast<uint64_t>(n("round.raw_sent"))};
    const double pushed_at = state.real("pushed_at");
    at::NoGradGuard no_grad;
    tasks_ = n("tasks");
    pending_steps_ = n("pending_steps");
    pending_step_ = n("pending_step");
    if (n("pushed") == 1) pushed_at_ = pushed_at;
    else pushed_at_.reset();
    meter_ = RoundMeter(before, static_cast<int>(n("round.members")));
    global_.copy_(global);
    feedback_.load(state.tensor("feedback.residual"));
  }

 private:
  void push_pending(IslandContext& ctx) {
    if (pending_steps_ == 0) return;
    at::NoGradGuard no_grad;
    if (ctx.before_server_call) ctx.before_server_call();
    delta_.copy_(global_ - ctx.params);
    at::Tensor transmitted = feedback_.compensate(delta_, *ctx.codec);
    auto result = ctx.group->push(static_cast<uint64_t>(tasks_), delta_, *ctx.codec,
                                  static_cast<double>(pending_steps_), transmitted)->wait();
    require_usable(result, ctx, "async_local_sgd push", pending_step_, /*survivors_ok=*/false);
    feedback_.update();
    ++tasks_;
    pending_steps_ = 0;
    if (grace_s_ > 0) pushed_at_ = ctx.time->now_s();
    if (ctx.on_round)
      ctx.on_round(meter_.finish(*ctx.group, tasks_, pending_step_, 1, delta_.norm().item<double>()));
  }

  AlgorithmOptions options_;
  double grace_s_;  // AsyncLocalSgdOptions::grace_s
  int island_;
  int64_t task_;         // local steps per task
  int64_t steps_ = 0;    // this island's inner steps in total
  int64_t tasks_ = 0;    // tasks pushed so far
  int64_t pending_steps_ = 0;  // local steps of the task that ended, awaiting its push (0: none)
  int64_t pending_step_ = 0;   // the step that ended it
  std::optional<double> pushed_at_;  // time of the last push (grace window only)
  TimeSource* time_ = nullptr;       // this island's clock (checkpoint positions)
  at::Tensor global_;    // [N] the model pulled at the start of the current task
  at::Tensor delta_;     // [N] CPU
  compression::Pipeline raw_;  // pulls of the global model: lossless fp32
  Feedback feedback_;
  RoundMeter meter_;
};

// Applies each pseudo-gradient as it arrives; answers every pull with the current model.
class AsyncServer final : public transport::OuterServer {
 public:
  AsyncServer(const AlgorithmOptions& options, const at::Tensor& initial,
              std::function<void(const ServerRound&)> on_round)
      : AsyncServer(options, options.get<AsyncLocalSgdOptions>(), initial, std::move(on_round)) {}
  AsyncServer(const AlgorithmOptions& options, const AsyncLocalSgdOptions& own, const at::Tensor& initial,
              std::function<void(const ServerRound&)> on_round)
      : outer_(own.outer),
        dn_(own.outer.lr, own.outer.momentum, own.buffer_size > 0 ? own.buffer_size : options.islands, own.dn_c),
        naive_(own.async_update == AsyncUpdate::kNaive),
        on_round_(std::move(on_round)) {
    global_ = initial.detach().to(at::kCPU).clone();
  }

  void on_push(int, uint64_t, const at::Tensor& payload, double weight) override {
    at::NoGradGuard no_grad;
    if (naive_) {
      outer_.step(global_, payload);
    } else {
      dn_.apply(global_, payload);
    }
    applied_steps_ += std::llround(weight);
    if (on_round_) {
      ServerRound r;
      r.round = applied_steps_;
      r.global = global_;
      on_round_(r);
    }
  }

  std::optional<at::Tensor> on_pull(int, uint64_t) override { return global_; }

  // Checkpoints (between arrivals): "applied_steps" (local steps applied), "global", Delayed
  // Nesterov's "dn.arrivals", "dn.momentum" and "dn.buffer" (undefined before the first
  // arrival), the naive rule's outer optimizer "outer.*".
  State state() const override {
    State s;
    s.add("applied_steps", applied_steps_).add("global", global_);
    s.add("dn.arrivals", dn_.arrivals()).add("dn.momentum", dn_.momentum()).add("dn.buffer", dn_.buffer());
    outer_.save(s, "outer");
    return s;
  }
  void load(const State& s) override {
    const at::Tensor& global = s.tensor("global");
    TORCH_CHECK(global.defined() && global.numel() == global_.numel(), "async_local_sgd server checkpoint: malformed state");
    auto cpu = [](const at::Tensor& t) { return t.defined() ? t.to(at::kCPU) : t; };
    const int64_t applied = s.integer("applied_steps"), arrivals = s.integer("dn.arrivals");
    const at::Tensor momentum = cpu(s.tensor("dn.momentum")), buffer = cpu(s.tensor("dn.buffer"));
    outer_.load(s, "outer", at::kCPU);
    at::NoGradGuard no_grad;
    applied_steps_ = applied;
    global_.copy_(global);
    dn_.load(arrivals, momentum, buffer);
  }

 private:
  OuterOptimizer outer_;
  async_local_sgd::DelayedNesterov dn_;
  bool naive_;
  std::function<void(const ServerRound&)> on_round_;
  at::Tensor global_;
  int64_t applied_steps_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_async_local_sgd(const AlgorithmOptions& options, int island) {
  return std::make_unique<AsyncWorker>(options, island);
}

std::unique_ptr<transport::OuterServer> make_async_local_sgd_server(
    const AlgorithmOptions& options, const at::Tensor& initial,
    std::function<void(const ServerRound&)> on_round) {
  return std::make_unique<AsyncServer>(options, initial, std::move(on_round));
}

}  // namespace atl::algorithms
