#include "src/core/island_runtime.h"

#include <ATen/ATen.h>

#include <utility>

#include "algorithms/shared_tensors.h"
#include "src/core/params_file.h"

namespace atl::core {

IslandRuntime::IslandRuntime(int island, IslandParts& parts, const config::TrainConfig& train,
                             transport::Group* group, const compression::Pipeline* codec, int64_t shard_size,
                             Evaluator* evaluator, bool classifier, IslandHost host)
    : island_(island), parts_(parts), train_(train), evaluator_(evaluator), classifier_(classifier),
      host_(std::move(host)) {
  context_.island = island;
  context_.params = parts_.model->params();
  context_.grads = parts_.model->grads();
  context_.group = group;
  context_.codec = codec;
  context_.shard_size = shard_size;
  for (const auto& s : parts_.model->layout()) {
    const int module = parts_.block_modules.empty() ? 0 : parts_.block_modules.at(static_cast<size_t>(s.block + 1));
    context_.layout.push_back({s.offset, s.numel, s.block, s.shape, module});
  }
  context_.path = parts_.path;
  if (parts_.use_path) {  // fewer islands than paths
    context_.switch_path = [this](int path, int64_t examples, bool fresh_inner) {
      parts_.use_path(parts_, path, examples, fresh_inner);
      context_.shard_size = parts_.sampler->shard_size();
    };
  }
  context_.time = host_.algorithm_time != nullptr ? host_.algorithm_time : host_.time;
  context_.shared = host_.shared;
  context_.outer_shards = host_.outer_shards;
  context_.on_round = [this](const algorithms::RoundInfo& r) {
    if (host_.after_round) host_.after_round(r);
    host_.record(round_record(island_, r, host_.round_times(), now()));
  };

  EvalRole::Hooks h;
  h.is_lead = host_.is_lead;
  h.recorded = host_.eval_recorded;
  h.evaluate = [this](int64_t step, const at::Tensor& global) { evaluate(step, global); };
  h.now_s = [this] { return host_.time->now_s(); };
  h.wait = host_.wait;
  if (host_.shared != nullptr)  // the islands in step keep one copy of a step's model between them
    h.keep = [shared = host_.shared](const at::Tensor& global) { return shared->share(global.clone()); };
  eval_role_ = std::make_unique<EvalRole>(std::move(h), host_.eval_patience_s, host_.eval_settle_every_s);

  loop_.context = &context_;
  loop_.train = &train_;
  loop_.forward_backward = [this](int64_t) {
    if (host_.reduce_ranks) return host_.reduce_ranks(context_.grads, forward_backward(parts_, train_, host_.share));
    return forward_backward_ranks(parts_, train_, host_.share.ranks,
                                  host_.rank_sum != nullptr ? *host_.rank_sum : rank_sum_);
  };
  loop_.after_compute = host_.after_compute;
  loop_.compute_ends_after_step = host_.compute_ends_after_step;
  loop_.on_step = [this](int64_t step, int64_t total, double loss, double lr) { on_step(step, total, loss, lr); };
}

RecordTime IslandRuntime::now() const {
  RecordTime t;
  t.wall_s = host_.wall_s();
  if (host_.virtual_clock) t.sim_s = host_.time->now_s();
  return t;
}

void IslandRuntime::evaluate_start() {
  if (evaluator_ != nullptr && !parts_.algorithm->global_on_server()) {
    eval_role_->at_eval_step(0, eval_models(parts_.model->params(), /*initial=*/true));
  }
}

void IslandRuntime::join(Handover state, transport::Group* group) {
  context_.group = group;
  {
    at::NoGradGuard no_grad;
    parts_.model->params().copy_(state.global);
  }
  // A hand-over between processes travels on the CPU; the donor kept its outer state beside
  // its parameters.
  for (auto& e : state.state.entries()) {
    if (e.tensor.defined()) e.tensor = e.tensor.to(parts_.model->params().device());
  }
  steps_ = state.step;
  resuming_.reset();  // a resumed island that died and rejoins starts from the hand-over
  joining_ = std::move(state);
  Rejoin r;
  r.island = island_;
  r.donor = joining_->donor;
  r.step = joining_->step;
  r.round = handover_round(*joining_);
  r.first_seq = joining_->first_seq;
  r.epoch = joining_->epoch;
  host_.record(rejoin_record(r, now()));
}

void IslandRuntime::resume(const Saved& state, std::optional<algorithms::AlgorithmCheckpoint> algorithm) {
  steps_ = state.steps;
  loss_acc_ = state.loss_acc;
  loss_n_ = state.loss_n;
  if (!algorithm) return;
  for (auto& e : algorithm->entries())
    if (e.tensor.defined()) e.tensor = e.tensor.to(parts_.model->params().device());
  resuming_ = std::move(algorithm);
}

void IslandRuntime::run() {
  loop_.algorithm = parts_.algorithm.get();
  loop_.optimizer = parts_.optimizer.get();
  if (resuming_) {
    loop_.first_step = steps_ + 1;
    loop_.after_setup = [this] { parts_.algorithm->load(context_, *resuming_); };
  } else if (joining_) {
    loop_.first_step = joining_->step + 1;
    loop_.after_setup = [this] { parts_.algorithm->import_state(context_, joining_->state); };
  } else {
    loop_.first_step = 1;
    loop_.after_setup = nullptr;
  }
  if (host_.after_setup) {
    loop_.after_setup = [this, inner = loop_.after_setup, step = loop_.first_step - 1] {
      if (inner) inner();
      host_.after_setup(step);
    };
  }
  parts_.model->set_training(true);
  run_island(loop_);
}

void IslandRuntime::on_step(int64_t step, int64_t total, double loss, double lr) {
  if (host_.before_records) host_.before_records(step, total, loss);
  steps_ = step;
  loss_acc_ += loss;
  ++loss_n_;
  if (step % train_.log_every == 0 || step == total) {
    host_.record(train_record(island_, step, loss_acc_ / static_cast<double>(loss_n_), lr, now()));
    loss_acc_ = 0;
    loss_n_ = 0;
  }
  // A re-routing comes before the step's eval, which is routed by it.
  if (parts_.rerouter && step == parts_.rerouter->step()) reshard(step);
  if (evaluator_ != nullptr && !parts_.algorithm->global_on_server()) {
    if ((train_.eval_every > 0 && step % train_.eval_every == 0) || step == total) {
      eval_role_->at_eval_step(step, eval_models(parts_.algorithm->global_params()));
      parts_.model->set_training(true);
    } else {
      eval_role_->settle();
    }
  }
  if (host_.after_step) host_.after_step(step, total, loss, lr);
}

at::Tensor IslandRuntime::eval_models(const at::Tensor& global, bool initial) const {
  if (parts_.eval_path != kEveryPath) return global;
  // Every path starts from the base model (the initial parameters); later each path's model
  // is composed from this island's copies of its modules.
  const int P = scorer()->paths();
  if (initial) return global.repeat({P});
  std::vector<at::Tensor> models;
  for (int p = 0; p < P; ++p) {
    models.push_back(parts_.algorithm->path_global_params(p));
    TORCH_CHECK(models.back().defined(), "island ", island_, " holds no global model of path ", p);
  }
  return at::cat(models);
}

void IslandRuntime::evaluate(int64_t step, const at::Tensor& global) {
  // Several paths: this island's path on its routed sequences (a path_eval record; the host
  // combines the paths' records into the routed eval, docs/architecture.md "Runs of several
  // models"); with kEveryPath each path in turn, in path order.
  const bool every = parts_.eval_path == kEveryPath;
  const int64_t n = parts_.model->numel();
  const int first = every ? 0 : evaluator_->paths() > 0 ? parts_.eval_path : -1;
  const int last = every ? evaluator_->paths() - 1 : first;
  for (int p = first; p <= last; ++p) {
    EvalResult r = evaluator_->evaluate(every ? global.narrow(0, p * n, n) : global, p, step);
    host_.record(eval_record(island_, step, r, classifier_, host_.eval_bytes(), now()));
    if (host_.after_eval) host_.after_eval(step, r);
  }
}

void IslandRuntime::reshard(int64_t step) {
  TORCH_CHECK(scorer() != nullptr, "a re-routing needs the island's evaluator");
  Rerouter::Outcome o =
      parts_.rerouter->run(*context_.group, *scorer(), eval_models(parts_.algorithm->global_params()));
  if (parts_.path_shards) {
    // Fewer islands than paths: the paths' data streams go on at their example counts, on
    // their new shards.
    const data::Sampler::Position at = parts_.sampler->position();
    const int64_t examples = at.epoch * parts_.sampler->shard_size() + static_cast<int64_t>(at.pos);
    *parts_.path_shards = std::move(o.path_shards);
    parts_.use_path(parts_, parts_.path, examples, false);
    path_sizes_ = o.path_train_sizes;  // the weights of weighting: shard_size from now on
    context_.path_shard_sizes = &path_sizes_;
  } else {
    parts_.sampler = parts_.rerouter->sampler(o.shard);
  }
  context_.shard_size = parts_.sampler->shard_size();
  scorer()->reroute(step, std::move(o.val_batches), o.path_train_sizes);
  if (!o.contributors.empty() && o.contributors.front() == island_) {
    Reshard r;
    r.island = island_;
    r.step = step;
    for (int64_t n : o.labels) r.router_sequences += n;
    r.labels = o.labels;
    r.path_train_sequences = o.path_train_sizes;
    r.path_val_sequences = o.path_val_sequences;
    r.moved = o.moved;
    r.balance_error = o.balance_error;
    r.contributors = static_cast<int>(o.contributors.size());
    host_.record(reshard_record(r, now()));
  }
}

void IslandRuntime::finish() {
  eval_role_->drain();
  const auto bytes = context_.group->bytes();
  IslandEnd e;
  e.island = island_;
  e.steps = steps_;
  e.bytes_sent = bytes.sent;
  e.bytes_recv = bytes.received;
  e.raw_sent = bytes.raw_sent;
  // Equal on islands that hold bitwise the same model (e.g. after an exact hand-over).
  if (!parts_.algorithm->global_on_server()) e.global_xxh64 = params_xxh64_hex(parts_.algorithm->global_params());
  host_.record(island_end_record(e, now()));
}

void IslandRuntime::write_final_params(const std::string& file, int path) const {
  const bool own = path < 0 || path == parts_.eval_path;
  const at::Tensor params = own ? parts_.algorithm->global_params() : parts_.algorithm->path_global_params(path);
  TORCH_CHECK(params.defined(), "island ", island_, " holds no global model of path ", path);
  write_params(file, params);
}

void IslandRuntime::write_final_outputs(const std::string& dir, const Roles& roles, const std::vector<int>& running,
                                        const std::function<bool(int)>& claim,
                                        const std::function<void(int)>& wrote) const {
  auto write = [&](int path) {
    if (!claim(path)) return;
    write_final_params(dir + "/" + final_params_name(path), path);
    wrote(path);
  };
  if (Roles::leads_run(island_, running) && !parts_.algorithm->global_on_server()) write(-1);
  if (!roles.leads(island_, running)) return;
  for (int p : held_paths()) write(p);
}

std::vector<int> IslandRuntime::held_paths() const {
  if (parts_.eval_path >= 0) return {parts_.eval_path};
  std::vector<int> out;
  if (parts_.eval_path == kEveryPath && evaluator_ != nullptr)
    for (int p = 0; p < evaluator_->paths(); ++p) out.push_back(p);
  return out;
}

}  // namespace atl::core
