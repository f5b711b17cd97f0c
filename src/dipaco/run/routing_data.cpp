#include "src/dipaco/run/routing_data.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>

#include "src/base/log.h"
#include "src/core/components.h"
#include "src/dipaco/run/options.h"
#include "src/dipaco/run/reshard.h"
#include "src/data/rng.h"
#include "src/dipaco/routing.h"
#include "src/models/gpt.h"

namespace atl::core {

namespace {

// The base model's routing features of `rows` of `split` (docs/dipaco.md "Routing"): the
// last block's hidden states averaged over the first dipaco.prefix tokens, [rows, dim] doubles.
// Every process must get the same bits whatever its thread count, so each batch of 256
// sequences is computed on one thread with single-threaded kernels (libtorch's and
// OpenBLAS's); the batches are spread over the run's threads (run.threads), each batch's
// numbers the same on whichever thread computes it.
dipaco::Matrix routing_features(const config::Config& config, models::Gpt& gpt, const data::Dataset& split) {
  constexpr int64_t kBatch = 256;
  const int64_t n = split.size(), prefix = config.dipaco.prefix;
  dipaco::Matrix x(n, config.model.dim);
  const int threads = at::get_num_threads();
  const int64_t batches = (n + kBatch - 1) / kBatch;
  auto compute = [&](int64_t b) {
    std::vector<int64_t> idx;
    for (int64_t i = b * kBatch; i < std::min(n, (b + 1) * kBatch); ++i) idx.push_back(i);
    const at::Tensor h = gpt.hidden(split.gather(idx).input.narrow(1, 0, prefix))
                             .mean(1)
                             .to(at::kCPU, at::kDouble)
                             .contiguous();
    std::copy(h.data_ptr<double>(), h.data_ptr<double>() + h.numel(), x.row(b * kBatch));
  };
  core::configure_threads(1);  // OpenBLAS's pool: one thread, the caller's
  at::set_num_threads(threads);
  // In libtorch's parallel region every operator runs on the calling thread alone.
  at::parallel_for(0, batches, 1, [&](int64_t from, int64_t to) {
    at::NoGradGuard no_grad;  // thread-local: each worker's own
    for (int64_t b = from; b < to; ++b) compute(b);
  });
  core::configure_threads(threads);
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
}  // namespace

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
  auto router = std::make_shared<RouterInput>();
  router->train_features = routing_features(config, *gpt, train);
  router->val_features = routing_features(config, *gpt, val);
  d.router = router;
  if (config.dipaco.routing == "product_kmeans") {
    std::vector<int> ks;
    for (const auto& l : config.dipaco.levels) ks.push_back(l.modules);
    const dipaco::ProductKMeans pk = dipaco::product_kmeans(router->train_features, ks, config.run.seed);
    d.train_path = pk.assignment;
    d.val_path = dipaco::route(pk, router->val_features);
  } else {
    const dipaco::KMeans km = dipaco::kmeans(router->train_features, P, config.run.seed);
    d.train_path = km.assignment;
    d.val_path = dipaco::nearest(router->val_features, km.centroids);
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

void add_path_parts(const config::Config& config, const RunData& data, int island, bool tasks, IslandParts& p) {
  const dipaco::Paths paths = dipaco_paths(config);
  p.eval_path = eval_path_of(config, island);
  p.path = tasks ? island : p.eval_path;  // fewer islands than paths: the path of round 0
  if (config.dipaco.reshard_at > 0) p.rerouter = std::make_shared<Resharder>(config, data, island);
  for (int b = -1; b < config.model.layers; ++b) p.block_modules.push_back(paths.module_of(b, p.path));
}

}  // namespace atl::core
