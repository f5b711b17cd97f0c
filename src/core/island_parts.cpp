#include "src/core/island_parts.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "src/core/components.h"
#include "src/core/dipaco_reshard.h"
#include "src/dipaco/routing.h"
#include "src/base/log.h"
#include "src/models/gpt.h"
#include "src/core/params_file.h"
#include "src/data/rng.h"
#include "src/data/kinds.h"

#include <algorithm>
#include <cmath>

namespace atl::core {

namespace {

void warm_start(const config::ModelConfig& model_config, models::Model& model);

// The base model's routing features of `rows` of `split` (docs/dipaco.md "Routing"): the
// last block's hidden states averaged over the first dipaco.prefix tokens, [rows, dim] doubles,
// computed on one thread so that every process gets the same bits.
dipaco::Matrix routing_features(const config::Config& config, models::Gpt& gpt, const data::Dataset& split) {
  const int64_t n = split.size(), prefix = config.dipaco.prefix;
  dipaco::Matrix x(n, config.model.dim);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  at::NoGradGuard no_grad;
  for (int64_t from = 0; from < n; from += 256) {
    std::vector<int64_t> idx;
    for (int64_t i = from; i < std::min(n, from + 256); ++i) idx.push_back(i);
    const at::Tensor h = gpt.hidden(split.gather(idx).input.narrow(1, 0, prefix))
                             .mean(1)
                             .to(at::kCPU, at::kDouble)
                             .contiguous();
    std::copy(h.data_ptr<double>(), h.data_ptr<double>() + h.numel(), x.row(from));
  }
  at::set_num_threads(threads);
  return x;
}

// Discriminative re-sharding's router split (docs/dipaco.md): a seeded router_fraction of the
// training sequences (at least one), taken out of training (train_path -1).
void hold_out_router_split(const config::Config& config, RunData& d) {
  const int64_t n = static_cast<int64_t>(d.train_path.size());
  const int64_t r = std::max<int64_t>(1, std::llround(config.dipaco.router_fraction * static_cast<double>(n)));
  if (r + d.paths > n)
    config::fail_key(config, "dipaco.router_fraction", "leaves fewer training sequences than paths");
  data::Rng rng(data::derive_seed(config.run.seed, data::SeedStream::kRouterSplit));
  std::vector<int64_t> perm = data::random_permutation(n, rng);
  perm.resize(static_cast<size_t>(r));
  std::sort(perm.begin(), perm.end());
  for (int64_t e : perm) d.train_path[static_cast<size_t>(e)] = -1;
  d.router_rows = std::move(perm);
}

// DiPaCo routing (docs/dipaco.md "Routing"): every training sequence goes to the path whose
// cluster its features fall in, and so does every validation sequence (routed evaluation);
// the islands of a path deal its training sequences round-robin. routing none: each island
// keeps its data.partition share, and the validation sequences are dealt to paths round-robin
// in the evaluation's order.
void route_to_paths(const config::Config& config, RunData& d) {
  const dipaco::Paths paths = dipaco_paths(config);
  const int P = paths.paths();
  d.paths = P;
  const data::Dataset& train = *d.splits.train;
  const data::Dataset& val = *d.splits.val;
  if (config.dipaco.routing == "none") {
    d.path_train_sizes.assign(static_cast<size_t>(P), 0);
    d.train_path.assign(static_cast<size_t>(train.size()), -1);
    for (int i = 0; i < static_cast<int>(d.shards.size()); ++i) {  // fewer islands than paths: P shards
      for (int64_t e : d.shards[static_cast<size_t>(i)]) d.train_path[static_cast<size_t>(e)] = i % P;
      d.path_train_sizes[static_cast<size_t>(i % P)] += static_cast<int64_t>(d.shards[static_cast<size_t>(i)].size());
    }
    d.val_path.assign(static_cast<size_t>(val.size()), 0);
    const auto order = data::validation_indices(val, 1, 0, config.run.seed);
    for (size_t r = 0; r < order.size(); ++r) d.val_path[static_cast<size_t>(order[r])] = static_cast<int>(r % P);
    return;
  }
  auto model = models::make_model(config.model, d.shape, c10::Device(c10::kCPU), config.run.seed);
  warm_start(config.model, *model);
  auto* gpt = dynamic_cast<models::Gpt*>(model.get());
  TORCH_CHECK(gpt != nullptr, "dipaco routing: the model is not a gpt");
  model->set_training(false);
  d.train_features = routing_features(config, *gpt, train);
  d.val_features = routing_features(config, *gpt, val);
  if (config.dipaco.routing == "product_kmeans") {
    std::vector<int> ks;
    for (const auto& l : config.dipaco.levels) ks.push_back(l.modules);
    const dipaco::ProductKMeans pk = dipaco::product_kmeans(d.train_features, ks, config.run.seed);
    d.train_path = pk.assignment;
    d.val_path = dipaco::route(pk, d.val_features);
  } else {
    const dipaco::KMeans km = dipaco::kmeans(d.train_features, P, config.run.seed);
    d.train_path = km.assignment;
    d.val_path = dipaco::nearest(d.val_features, km.centroids);
  }
  if (config.dipaco.reshard_at > 0) hold_out_router_split(config, d);
  if (config.islands.count < P) {  // fewer islands than paths: one shard per path
    d.shards.assign(static_cast<size_t>(P), {});
    for (int64_t e = 0; e < static_cast<int64_t>(d.train_path.size()); ++e)
      if (d.train_path[static_cast<size_t>(e)] >= 0) d.shards[static_cast<size_t>(d.train_path[static_cast<size_t>(e)])].push_back(e);
  } else {
    d.shards = deal_paths(config, d.train_path, P, config.islands.count);
  }
  d.path_train_sizes = dipaco::shard_sizes(d.train_path, P);
  std::string sizes, val_sizes;
  for (int64_t s : d.path_train_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
  for (int64_t s : dipaco::shard_sizes(d.val_path, P)) val_sizes += (val_sizes.empty() ? "" : ", ") + std::to_string(s);
  ATOLL_INFO("dipaco: " << config.dipaco.routing << " routing of " << train.size() << " training sequences to " << P
                        << " paths: [" << sizes << "]; validation: [" << val_sizes << "]");
}

// data.loss_after resolved (check_eval_keys has checked it).
int resolve_loss_after(const config::Config& config) {
  const int n = config.data.loss_after;
  if (n < 0) return config.algorithm.name == "dipaco" && config.dipaco.routing != "none" ? config.dipaco.prefix : 0;
  return n;
}

// DiPaCo with fewer islands than paths (docs/dipaco.md "Fewer islands than paths"): the
// number of paths, whose shards the islands take in turn; 0 otherwise.
int task_paths(const config::Config& config) {
  if (config.algorithm.name != "dipaco") return 0;
  const int P = dipaco_paths(config).paths();
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
  if (config.algorithm.name == "dipaco") route_to_paths(config, d);
  for (const auto& s : d.shards) d.shard_sizes.push_back(static_cast<int64_t>(s.size()));
  return d;
}

namespace {

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

}  // namespace

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
  if (options.name == "dipaco") {
    const dipaco::Paths paths = dipaco_paths(config);
    p.eval_path = eval_path_of(config, island);
    p.path = tasks ? island : p.eval_path;  // fewer islands than paths: the path of round 0
    if (config.dipaco.reshard_at > 0) p.resharder = std::make_shared<Resharder>(config, data, island);
    for (int b = -1; b < config.model.layers; ++b) p.block_modules.push_back(paths.module_of(b, p.path));
  }
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

double forward_backward(IslandParts& parts, const config::TrainConfig& train) {
  double loss = 0;
  for (int a = 0; a < train.grad_accum; ++a) {
    data::Batch batch = parts.sampler->next(train.batch_size);
    models::Output out = parts.model->forward(batch);
    (out.loss / static_cast<double>(train.grad_accum)).backward();
    loss += out.loss.item<double>() / train.grad_accum;
  }
  return loss;
}

void check_eval_keys(const config::Config& config) {
  const int n = config.data.loss_after;
  if (const data::DataKind* kind = data::find_data_kind(config.data.kind); n > 0 && kind && !kind->language)
    config::fail_key(config, "data.loss_after", "applies to language models (data.kind " + config.data.kind +
                                                    " is a classifier's)");
  if (n > config.model.seq_len)
    config::fail_key(config, "data.loss_after", std::to_string(n) + " tokens, longer than model.seq_len (" +
                                                    std::to_string(config.model.seq_len) + ")");
  if (config.algorithm.name != "dipaco" || config.dipaco.reshard_at == 0) return;
  const int64_t at = config.dipaco.reshard_at, h = config.algorithm.inner_steps;
  if (config.dipaco.routing == "none")
    config::fail_key(config, "dipaco.reshard_at", "re-sharding needs the router's features (dipaco.routing kmeans or "
                     "product_kmeans, not none)");
  if (at % h != 0 || at >= config.train.steps)
    config::fail_key(config, "dipaco.reshard_at", std::to_string(at) + ": must be an outer-round boundary (a multiple "
                     "of algorithm.inner_steps " + std::to_string(h) + ") before the last step (" +
                     std::to_string(config.train.steps) + ")");
  if (config.checkpoint.every > 0)
    config::fail_key(config, "dipaco.reshard_at", "checkpoints of a run that re-shards are not supported yet "
                     "(set checkpoint.every: 0)");
}

std::string final_params_name(int path) {
  return path < 0 ? "final_params.bin" : "final_params.path" + std::to_string(path) + ".bin";
}

std::vector<std::vector<int64_t>> deal_paths(const config::Config& config, const std::vector<int>& train_path, int paths,
                                             int islands) {
  std::vector<std::vector<int>> islands_of(static_cast<size_t>(paths));
  for (int i = 0; i < islands; ++i) islands_of[static_cast<size_t>(eval_path_of(config, i))].push_back(i);
  std::vector<int64_t> dealt(static_cast<size_t>(paths), 0);
  std::vector<std::vector<int64_t>> shards(static_cast<size_t>(islands));
  for (int64_t e = 0; e < static_cast<int64_t>(train_path.size()); ++e) {
    const int p = train_path[static_cast<size_t>(e)];
    if (p < 0) continue;
    const std::vector<int>& on = islands_of[static_cast<size_t>(p)];
    const int64_t k = dealt[static_cast<size_t>(p)]++ % static_cast<int64_t>(on.size());
    shards[static_cast<size_t>(on[static_cast<size_t>(k)])].push_back(e);
  }
  return shards;
}

int eval_path_of(const config::Config& config, int island) {
  if (config.algorithm.name != "dipaco") return -1;
  const int P = dipaco_paths(config).paths();
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
