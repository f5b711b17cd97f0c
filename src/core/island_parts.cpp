#include "src/core/island_parts.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "src/core/components.h"
#include "src/dipaco/run/options.h"
#include "src/dipaco/run/routing_data.h"
#include "src/base/log.h"
#include "src/models/gpt.h"
#include "src/core/params_file.h"
#include "src/data/rng.h"
#include "src/data/kinds.h"

#include <algorithm>
#include <cmath>

namespace atl::core {

namespace {

// data.loss_after resolved (check_eval_keys has checked it).
int resolve_loss_after(const config::Config& config) {
  const int n = config.data.loss_after;
  if (n < 0) return default_loss_after(config);
  return n;
}

// Fewer islands than paths (docs/architecture.md "Runs of several models"): the number of
// paths, whose shards the islands take in turn; 0 otherwise.
int task_paths(const config::Config& config) {
  const int P = run_paths(config);
  return config.islands.count < P ? P : 0;
}

// The seed of path `path`'s data stream when islands take paths in turn (any island that
// trains the path continues the same stream).
uint64_t path_seed(uint64_t seed, int path) { return seed * 1000003ULL + 1000000ULL + static_cast<uint64_t>(path); }

}  // namespace

RunData load_run_data(const config::Config& config) {
  const uint64_t seed = config.run.seed;
  RunData d;
  d.splits = data::load_splits(config.data, config.model.seq_len, seed);
  const int tasks = task_paths(config);
  d.shards = data::partition(*d.splits.train, tasks > 0 ? tasks : config.islands.count, config.data, seed);
  d.shape = {d.splits.train->vocab_size(), d.splits.train->num_classes(), d.splits.train->input_dim()};
  d.classifier = d.shape.classes > 0;
  check_eval_keys(config);
  d.loss_after = resolve_loss_after(config);
  if (run_paths(config) > 0) route_to_paths(config, d);
  for (const auto& s : d.shards) d.shard_sizes.push_back(static_cast<int64_t>(s.size()));
  return d;
}

// model.init_from: overwrite the seeded initialisation with an earlier run's final
// parameters. A missing, corrupt or differently shaped file is the user's error.
void warm_start(const config::ModelConfig& model_config, models::Model& model) {
  if (model_config.init_from.empty()) return;
  const std::string& path = model_config.init_from;
  StatusOr<at::Tensor> params = read_params(path);
  if (!params.is_ok())
    throw UserError("model.init_from: cannot load '" + path + "': " + params.status().to_string());
  at::Tensor& flat = model.params();
  if (params->numel() != flat.numel())
    throw UserError("model.init_from: '" + path + "' holds " + std::to_string(params->numel()) +
                    " parameters but this model has " + std::to_string(flat.numel()) +
                    " (a different model shape?)");
  at::NoGradGuard no_grad;
  flat.copy_(*params);
}

IslandParts make_island_parts(const config::Config& config, const RunData& data,
                              const algorithms::AlgorithmOptions& options, int island) {
  const uint64_t seed = config.run.seed;
  IslandParts p;
  // Same seed on every island: all start from bitwise the same parameters.
  p.model = models::make_model(config.model, data.shape, c10::Device(config.run.device), seed);
  warm_start(config.model, *p.model);
  const bool tasks = task_paths(config) > 0;
  p.sampler = std::make_unique<data::Sampler>(data.splits.train, data.shards.at(island),
                                              tasks ? path_seed(seed, island)
                                                    : seed * 1000003ULL + static_cast<uint64_t>(island));
  p.optimizer = train::make_inner_optimizer(config.train);
  p.algorithm = algorithms::make_algorithm(options, island);
  if (run_paths(config) > 0) add_path_parts(config, data, island, tasks, p);
  if (tasks) {
    p.path_shards = std::make_shared<std::vector<std::vector<int64_t>>>(data.shards);
    p.use_path = [train = data.splits.train, shards = p.path_shards, seed](IslandParts& parts, int path,
                                                                           int64_t examples, bool fresh_inner) {
      const std::vector<int64_t>& shard = shards->at(static_cast<size_t>(path));
      auto sampler = std::make_unique<data::Sampler>(train, shard, path_seed(seed, path));
      const int64_t n = static_cast<int64_t>(shard.size());
      sampler->seek({examples / n, static_cast<uint64_t>(examples % n)});
      parts.sampler = std::move(sampler);
      parts.path = path;
      if (fresh_inner) parts.optimizer->load(0, std::vector<at::Tensor>(parts.optimizer->state().size()));
    };
  }
  return p;
}

namespace {

// Forward + backward of this rank's rows of each micro-batch; the loss as forward_backward.
double share_gradient(IslandParts& parts, const std::vector<data::Batch>& batches, RankShare share) {
  double loss = 0;
  const auto n = static_cast<double>(batches.size());
  for (const data::Batch& whole : batches) {
    data::Batch batch = whole;
    if (share.ranks > 1) {
      const int64_t rows = whole.input.size(0) / share.ranks;
      batch.input = whole.input.narrow(0, share.rank * rows, rows);
      batch.target = whole.target.narrow(0, share.rank * rows, rows);
    }
    models::Output out = parts.model->forward(batch);
    (out.loss / n).backward();
    loss += out.loss.item<double>() / n;
  }
  return loss;
}

std::vector<data::Batch> draw_batches(IslandParts& parts, const config::TrainConfig& train) {
  std::vector<data::Batch> batches;
  for (int a = 0; a < train.grad_accum; ++a) batches.push_back(parts.sampler->next(train.batch_size));
  return batches;
}

}  // namespace

double forward_backward(IslandParts& parts, const config::TrainConfig& train, RankShare share) {
  return share_gradient(parts, draw_batches(parts, train), share);
}

double forward_backward_ranks(IslandParts& parts, const config::TrainConfig& train, int ranks, at::Tensor& sum) {
  if (ranks == 1) return forward_backward(parts, train);
  const std::vector<data::Batch> batches = draw_batches(parts, train);
  at::Tensor& grads = parts.model->grads();
  double loss = 0;
  for (int r = 0; r < ranks; ++r) {
    if (r > 0) {
      at::NoGradGuard no_grad;
      grads.zero_();
    }
    loss += share_gradient(parts, batches, {r, ranks});
    at::NoGradGuard no_grad;
    if (r == 0) {
      if (!sum.defined() || sum.sizes() != grads.sizes()) sum = at::empty_like(grads);
      sum.copy_(grads);
    } else {
      sum.add_(grads);
    }
  }
  at::NoGradGuard no_grad;
  grads.copy_(sum).div_(ranks);
  return loss / ranks;
}

std::string final_params_name(int path) {
  return path < 0 ? "final_params.bin" : "final_params.path" + std::to_string(path) + ".bin";
}

int eval_path_of(const config::Config& config, int island) {
  const int P = run_paths(config);
  if (P == 0) return -1;  // one model
  if (config.islands.count < P) return kEveryPath;  // fewer islands than paths: every island holds every path
  return island % P;  // island i trains path i mod P
}

namespace {

std::vector<data::Batch> batches_of(const data::Dataset& split, const std::vector<int64_t>& indices, int batch_size,
                                    int64_t score_from) {
  std::vector<data::Batch> out;
  for (size_t from = 0; from < indices.size(); from += static_cast<size_t>(batch_size)) {
    const size_t to = std::min(indices.size(), from + static_cast<size_t>(batch_size));
    out.push_back(split.gather(std::vector<int64_t>(indices.begin() + static_cast<std::ptrdiff_t>(from),
                                                    indices.begin() + static_cast<std::ptrdiff_t>(to))));
    out.back().score_from = score_from;
  }
  return out;
}

// data.loss_after N: targets from position N - 1 on (the prediction of token N + 1 onwards).
int64_t score_from(const RunData& d) { return d.loss_after > 0 ? d.loss_after - 1 : 0; }

}  // namespace

std::vector<std::vector<data::Batch>> routed_validation_batches(const config::Config& config, const RunData& d,
                                                                const std::vector<int>& val_path) {
  const data::Dataset& val = *d.splits.val;
  const auto order = data::validation_indices(val, config.train.batch_size, config.train.eval_batches, config.run.seed);
  std::vector<std::vector<int64_t>> of_path(static_cast<size_t>(d.paths));
  for (int64_t e : order) of_path[static_cast<size_t>(val_path[static_cast<size_t>(e)])].push_back(e);
  std::vector<std::vector<data::Batch>> out;
  for (const auto& idx : of_path) out.push_back(batches_of(val, idx, config.train.batch_size, score_from(d)));
  return out;
}

std::unique_ptr<Evaluator> make_evaluator(const config::Config& config, const RunData& data) {
  const uint64_t seed = config.run.seed;
  auto model = models::make_model(config.model, data.shape, c10::Device(config.run.device), seed);
  if (data.paths > 0) {
    return std::make_unique<Evaluator>(std::move(model), routed_validation_batches(config, data, data.val_path),
                                       data.path_train_sizes, data.classifier);
  }
  std::vector<data::Batch> batches =
      data::validation_batches(*data.splits.val, config.train.batch_size, config.train.eval_batches, seed);
  for (auto& b : batches) b.score_from = score_from(data);
  return std::make_unique<Evaluator>(std::move(model), std::move(batches), data.classifier);
}

}  // namespace atl::core
