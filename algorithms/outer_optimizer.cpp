#include "algorithms/outer_optimizer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>

namespace atl::algorithms {

OuterOptimizer::OuterOptimizer(const OuterOptimizer& o)
    : options_(o.options_), buf_(o.buf_), v_(o.v_), steps_(o.steps_), shared_(o.shared_), n_(o.n_) {}

OuterOptimizer::~OuterOptimizer() {
  if (shards_ != nullptr) shards_->leave(this);
}

void OuterOptimizer::place(SharedTensors* shared, OuterShards* shards) {
  shared_ = shared;
  if (shards_ != nullptr) shards_->leave(this);
  shards_ = shards;
  if (shards_ != nullptr) shards_->enroll(this);
}

std::vector<transport::ShardRange> OuterOptimizer::ranges(int64_t n) const {
  if (shards_ == nullptr || shards_->ranks() < 2) return {};
  return transport::shard_ranges(n, shards_->ranks());
}

void OuterOptimizer::save(NamedState& s, const std::string& prefix) const {
  const bool sharded = !ranges(n_).empty() && (buf_.defined() || v_.defined());
  TORCH_CHECK(!sharded || whole_buf_.defined() || whole_v_.defined(),
              "outer optimizer: its state is sharded over the island's ranks and was not gathered "
              "(OuterShards::gather_all) before it was saved");
  s.add(prefix + ".steps", steps_)
      .add(prefix + ".momentum", sharded ? whole_buf_ : buf_)
      .add(prefix + ".second_moment", sharded ? whole_v_ : v_);
}

void OuterOptimizer::load(const NamedState& s, const std::string& prefix, c10::Device device) {
  const int64_t steps = s.integer(prefix + ".steps");
  auto copy = [&](const std::string& name) {
    const at::Tensor& t = s.tensor(prefix + "." + name);
    return t.defined() ? t.to(device, /*non_blocking=*/false, /*copy=*/true) : at::Tensor();
  };
  at::Tensor buf = copy("momentum"), v = copy("second_moment");
  steps_ = steps;
  if (buf.defined()) n_ = buf.numel();
  // Sharded: this rank's shard of the whole state the file or the hand-over holds.
  if (const auto r = ranges(n_); !r.empty()) {
    const transport::ShardRange mine = r[static_cast<size_t>(shards_->rank())];
    auto cut = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, mine.begin, mine.size).clone() : t; };
    buf = cut(buf);
    v = cut(v);
  }
  buf_ = std::move(buf);
  v_ = std::move(v);
  whole_buf_ = whole_v_ = at::Tensor();
}

void OuterOptimizer::step(at::Tensor& theta_g, const at::Tensor& delta) {
  whole_buf_ = whole_v_ = at::Tensor();
  n_ = theta_g.numel();
  const auto r = ranges(n_);
  if (r.empty()) {
    writable(shared_, buf_);
    writable(shared_, v_);
    update(theta_g, delta);
    buf_ = share(shared_, buf_);
    v_ = share(shared_, v_);
    return;
  }
  // This rank's shard of the step, then every rank's shard to every rank.
  TORCH_CHECK(theta_g.is_contiguous() && theta_g.dim() == 1, "outer optimizer: a sharded step needs a contiguous [N] buffer");
  const transport::ShardRange mine = r[static_cast<size_t>(shards_->rank())];
  at::Tensor part = theta_g.narrow(0, mine.begin, mine.size);
  update(part, delta.reshape({-1}).narrow(0, mine.begin, mine.size));
  shards_->share(theta_g, r);
}

void OuterOptimizer::gather() {
  whole_buf_ = whole_v_ = at::Tensor();
  const auto r = ranges(n_);
  if (r.empty()) return;
  const transport::ShardRange mine = r[static_cast<size_t>(shards_->rank())];
  auto whole = [&](const at::Tensor& part) {
    if (!part.defined()) return part;  // alike on every rank (the same steps)
    at::Tensor t = at::zeros({n_}, part.options());
    t.narrow(0, mine.begin, mine.size).copy_(part);
    shards_->share(t, r);
    return shards_->rank() == 0 ? t : at::Tensor();
  };
  whole_buf_ = whole(buf_);
  whole_v_ = whole(v_);
}

void OuterShards::gather_all() {
  for (OuterOptimizer* o : enrolled_) o->gather();
}

void OuterShards::release_all() {
  for (OuterOptimizer* o : enrolled_) o->whole_buf_ = o->whole_v_ = at::Tensor();
}

void OuterShards::leave(OuterOptimizer* o) { std::erase(enrolled_, o); }

int64_t OuterShards::values_held() const {
  int64_t n = 0;
  for (const OuterOptimizer* o : enrolled_)
    n += (o->buf_.defined() ? o->buf_.numel() : 0) + (o->v_.defined() ? o->v_.numel() : 0);
  return n;
}

int64_t OuterShards::values_whole() const {
  int64_t n = 0;
  for (const OuterOptimizer* o : enrolled_) n += o->n_ * ((o->buf_.defined() ? 1 : 0) + (o->v_.defined() ? 1 : 0));
  return n;
}

void OuterOptimizer::update(at::Tensor& theta_g, const at::Tensor& delta) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double lr = options_.lr;
  switch (options_.kind) {
    case OuterKind::kNesterov:
    case OuterKind::kSgd: {
      const double mu = options_.momentum;
      if (mu == 0.0) {
        theta_g.sub_(delta, lr);
        return;
      }
      if (!buf_.defined()) buf_ = at::zeros_like(delta);
      buf_.mul_(mu).add_(delta);
      if (options_.kind == OuterKind::kNesterov) {
        theta_g.sub_(delta, lr).sub_(buf_, lr * mu);
      } else {
        theta_g.sub_(buf_, lr);
      }
      return;
    }
    case OuterKind::kAdam: {
      if (!buf_.defined()) {
        buf_ = at::zeros_like(delta);
        v_ = at::zeros_like(delta);
      }
      const double b1 = options_.beta1, b2 = options_.beta2;
      buf_.mul_(b1).add_(delta, 1 - b1);
      v_.mul_(b2).addcmul_(delta, delta, 1 - b2);
      const double bc1 = 1 - std::pow(b1, static_cast<double>(steps_));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(steps_));
      at::Tensor denom = (v_ / bc2).sqrt_().add_(options_.eps);
      theta_g.addcdiv_(buf_, denom, -lr / bc1);
      return;
    }
  }
}

}  // namespace atl::algorithms
