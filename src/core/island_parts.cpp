#include "src/core/island_parts.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "src/core/components.h"
#include "src/dipaco/routing.h"
#include "src/base/log.h"
#include "src/models/gpt.h"
#include "src/core/params_file.h"

namespace atl::core {

namespace {

void warm_start(const config::ModelConfig& model_config, models::Model& model);

// DiPaCo routing (docs/dipaco.md "Routing"): every training sequence goes to the path whose
// cluster its features fall in; the islands of a path deal its sequences round-robin.
// Features: the base model's last-block hidden states averaged over the first
// dipaco.prefix tokens, computed on one thread so that every process gets the same bits.
void route_to_paths(const config::Config& config, RunData& d) {
  const dipaco::Paths paths = dipaco_paths(config);
  const int P = paths.paths();
  auto model = models::make_model(config.model, d.shape, c10::Device(c10::kCPU), config.run.seed);
  warm_start(config.model, *model);
  auto* gpt = dynamic_cast<models::Gpt*>(model.get());
  TORCH_CHECK(gpt != nullptr, "dipaco routing: the model is not a gpt");
  model->set_training(false);
  const data::Dataset& train = *d.splits.train;
  const int64_t n = train.size(), prefix = config.dipaco.prefix;
  dipaco::Matrix x(n, config.model.dim);
  {
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    at::NoGradGuard no_grad;
    for (int64_t from = 0; from < n; from += 256) {
      std::vector<int64_t> idx;
      for (int64_t i = from; i < std::min(n, from + 256); ++i) idx.push_back(i);
      const at::Tensor h = gpt->hidden(train.gather(idx).input.narrow(1, 0, prefix))
                               .mean(1)
                               .to(at::kCPU, at::kDouble)
                               .contiguous();
      std::copy(h.data_ptr<double>(), h.data_ptr<double>() + h.numel(), x.row(from));
    }
    at::set_num_threads(threads);
  }
  std::vector<int> path_of;
  if (config.dipaco.routing == "product_kmeans") {
    std::vector<int> ks;
    for (const auto& l : config.dipaco.levels) ks.push_back(l.modules);
    path_of = dipaco::product_kmeans(x, ks, config.run.seed).assignment;
  } else {
    path_of = dipaco::kmeans(x, P, config.run.seed).assignment;
  }
  if (config.islands.count < P) {  // fewer islands than paths: one shard per path
    d.shards.assign(static_cast<size_t>(P), {});
    for (int64_t e = 0; e < n; ++e) d.shards[path_of[e]].push_back(e);
  } else {
    std::vector<std::vector<int>> islands_of(static_cast<size_t>(P));
    for (int i = 0; i < config.islands.count; ++i) islands_of[i % P].push_back(i);
    std::vector<int64_t> dealt(static_cast<size_t>(P), 0);
    d.shards.assign(static_cast<size_t>(config.islands.count), {});
    for (int64_t e = 0; e < n; ++e) {
      const std::vector<int>& on = islands_of[path_of[e]];
      d.shards[on[dealt[path_of[e]]++ % static_cast<int64_t>(on.size())]].push_back(e);
    }
  }
  std::string sizes;
  for (int64_t s : dipaco::shard_sizes(path_of, P)) sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
  ATOLL_INFO("dipaco: " << config.dipaco.routing << " routing of " << n << " training sequences to " << P
                        << " paths: [" << sizes << "]");
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
  if (config.algorithm.name == "dipaco" && config.dipaco.routing != "none") route_to_paths(config, d);
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
    p.path = island % paths.paths();
    for (int b = -1; b < config.model.layers; ++b) p.block_modules.push_back(paths.module_of(b, p.path));
  }
  if (tasks) {
    p.use_path = [train = data.splits.train, shards = data.shards, seed](IslandParts& parts, int path,
                                                                         int64_t examples, bool fresh_inner) {
      const std::vector<int64_t>& shard = shards.at(static_cast<size_t>(path));
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

std::unique_ptr<Evaluator> make_evaluator(const config::Config& config, const RunData& data) {
  const uint64_t seed = config.run.seed;
  return std::make_unique<Evaluator>(
      models::make_model(config.model, data.shape, c10::Device(config.run.device), seed),
      data::validation_batches(*data.splits.val, config.train.batch_size, config.train.eval_batches, seed),
      data.classifier);
}

}  // namespace atl::core
