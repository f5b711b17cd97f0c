#include "src/core/island_parts.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "src/core/components.h"
#include "src/core/params_file.h"

namespace atl::core {

RunData load_run_data(const config::Config& config) {
  const uint64_t seed = config.run.seed;
  RunData d;
  d.splits = data::load_splits(config.data, config.model.seq_len, seed);
  d.shards = data::partition(*d.splits.train, config.islands.count, config.data, seed);
  for (const auto& s : d.shards) d.shard_sizes.push_back(static_cast<int64_t>(s.size()));
  d.shape = {d.splits.train->vocab_size(), d.splits.train->num_classes(), d.splits.train->input_dim()};
  d.classifier = d.shape.classes > 0;
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
  p.sampler = std::make_unique<data::Sampler>(data.splits.train, data.shards.at(island),
                                              seed * 1000003ULL + static_cast<uint64_t>(island));
  p.optimizer = train::make_inner_optimizer(config.train);
  p.algorithm = algorithms::make_algorithm(options, island);
  if (options.name == "dipaco") {
    const dipaco::Paths paths = dipaco_paths(config);
    p.path = island % paths.paths();
    for (int b = -1; b < config.model.layers; ++b) p.block_modules.push_back(paths.module_of(b, p.path));
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
