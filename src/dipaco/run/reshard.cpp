#include "src/dipaco/run/reshard.h"
#include "src/dipaco/run/routing_data.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "src/base/log.h"
#include "src/dipaco/routing.h"

namespace atl::core {

Resharder::Resharder(const config::Config& config, const RunData& data, int island)
    : config_(config), data_(data), island_(island), path_(eval_path_of(config, island)) {}

std::unique_ptr<data::Sampler> Resharder::sampler(const std::vector<int64_t>& shard) const {
  return std::make_unique<data::Sampler>(data_.splits.train, shard,
                                         config_.run.seed * 1000003ULL + static_cast<uint64_t>(island_));
}

Resharder::Outcome Resharder::run(transport::Group& group, Evaluator& scorer, const at::Tensor& models) {
  const int P = data_.paths;
  const auto& rows = data_.router_rows;
  const int64_t R = static_cast<int64_t>(rows.size());
  TORCH_CHECK(P > 0 && R > 0, "dipaco re-sharding without paths or router split");

  // 1. This path's loss on every router sequence, after the prefix (data.loss_after).
  std::vector<data::Batch> batches;
  const int64_t from = data_.loss_after > 0 ? data_.loss_after - 1 : 0;
  for (int64_t i = 0; i < R; i += config_.train.batch_size) {
    const int64_t to = std::min(R, i + config_.train.batch_size);
    batches.push_back(data_.splits.train->gather(std::vector<int64_t>(rows.begin() + i, rows.begin() + to)));
    batches.back().score_from = from;
  }
  // 2. Everyone's: per path scored, [int32 path][R doubles], host byte order (every process
  // is the same build).
  const size_t entry = sizeof(int32_t) + static_cast<size_t>(R) * sizeof(double);
  std::vector<int> scored{path_};
  if (path_ == kEveryPath) {
    scored.clear();
    for (int p = 0; p < P; ++p) scored.push_back(p);
  }
  const int64_t n = models.numel() / static_cast<int64_t>(scored.size());
  TORCH_CHECK(n * static_cast<int64_t>(scored.size()) == models.numel(), "dipaco re-sharding: ", models.numel(),
              " parameters for ", scored.size(), " paths");
  std::vector<uint8_t> bytes;
  for (size_t k = 0; k < scored.size(); ++k) {
    const std::vector<double> mine = scorer.sequence_losses(models.narrow(0, static_cast<int64_t>(k) * n, n), batches);
    TORCH_CHECK(static_cast<int64_t>(mine.size()) == R, "dipaco re-sharding: scored ", mine.size(), " of ", R);
    const int32_t p32 = scored[k];
    bytes.resize(bytes.size() + entry);
    uint8_t* at = bytes.data() + bytes.size() - entry;
    std::memcpy(at, &p32, sizeof p32);
    std::memcpy(at + sizeof p32, mine.data(), static_cast<size_t>(R) * sizeof(double));
  }
  std::vector<std::vector<uint8_t>> gathered;
  const transport::CollectiveResult res = group.allgather(std::move(bytes), &gathered)->wait();
  TORCH_CHECK(res.status.is_ok() || res.status.code() == StatusCode::kPeerLost,
              "dipaco re-sharding: the exchange of router scores failed: ", res.status.to_string());
  Outcome o;
  o.contributors = res.contributors;
  dipaco::Matrix losses(R, P);
  std::vector<bool> have(static_cast<size_t>(P), false);
  for (size_t c = 0; c < gathered.size(); ++c) {
    const std::vector<uint8_t>& b = gathered[c];
    TORCH_CHECK(!b.empty() && b.size() % entry == 0, "dipaco re-sharding: island ", res.contributors[c], " sent ",
                b.size(), " bytes of scores");
    for (size_t from = 0; from < b.size(); from += entry) {
      int32_t p = 0;
      std::memcpy(&p, b.data() + from, sizeof p);
      TORCH_CHECK(p >= 0 && p < P, "dipaco re-sharding: island ", res.contributors[c], " scored path ", p);
      if (have[static_cast<size_t>(p)]) continue;  // the lowest island that scored the path
      have[static_cast<size_t>(p)] = true;
      for (int64_t i = 0; i < R; ++i) {
        double v = 0;
        std::memcpy(&v, b.data() + from + sizeof p + static_cast<size_t>(i) * sizeof(double), sizeof v);
        losses.row(i)[p] = std::isfinite(v) ? v : std::numeric_limits<double>::max();
      }
    }
  }
  for (int p = 0; p < P; ++p)
    if (!have[static_cast<size_t>(p)])
      for (int64_t i = 0; i < R; ++i) losses.row(i)[p] = std::numeric_limits<double>::infinity();

  // 3. Labels, and a linear router balanced to the paths' current shares.
  const std::vector<int> labels = dipaco::best_paths(losses);
  o.labels = dipaco::shard_sizes(labels, P);
  const int64_t dim = data_.router->train_features.cols;
  dipaco::Matrix x(R, dim);
  for (int64_t i = 0; i < R; ++i)
    std::copy(data_.router->train_features.row(rows[static_cast<size_t>(i)]),
              data_.router->train_features.row(rows[static_cast<size_t>(i)]) + dim, x.row(i));
  std::vector<double> target(static_cast<size_t>(P));
  double total = 0;
  for (int64_t s : data_.path_train_sizes) total += static_cast<double>(s);
  for (int p = 0; p < P; ++p) target[static_cast<size_t>(p)] = static_cast<double>(data_.path_train_sizes[static_cast<size_t>(p)]) / total;
  dipaco::LinearRouter router = dipaco::fit_linear_router(x, labels, P, target);
  o.balance_error = dipaco::balance(router, x, target, 0);

  // 4. Re-route training (the router split stays out) and validation.
  const std::vector<int> routed = router.route(data_.router->train_features);
  std::vector<int> train_path = data_.train_path;
  for (size_t e = 0; e < train_path.size(); ++e) {
    if (train_path[e] < 0) continue;
    if (train_path[e] != routed[e]) ++o.moved;
    train_path[e] = routed[e];
  }
  o.path_train_sizes = dipaco::shard_sizes(train_path, P);
  if (path_ == kEveryPath) {  // fewer islands than paths: one shard per path
    o.path_shards.assign(static_cast<size_t>(P), {});
    for (size_t e = 0; e < train_path.size(); ++e)
      if (train_path[e] >= 0) o.path_shards[static_cast<size_t>(train_path[e])].push_back(static_cast<int64_t>(e));
    for (int p = 0; p < P; ++p)
      TORCH_CHECK(!o.path_shards[static_cast<size_t>(p)].empty(), "dipaco re-sharding left path ", p,
                  " without training sequences");
  } else {
    const std::vector<std::vector<int64_t>> shards = deal_paths(config_, train_path, P, static_cast<int>(data_.shards.size()));
    o.shard = shards.at(static_cast<size_t>(island_));
    TORCH_CHECK(!o.shard.empty(), "dipaco re-sharding left island ", island_, " (path ", path_,
                ") without training sequences");
  }
  o.val_path = router.route(data_.router->val_features);
  o.val_batches = routed_validation_batches(config_, data_, o.val_path);
  for (const auto& b : o.val_batches) {
    int64_t n = 0;
    for (const auto& batch : b) n += batch.target.size(0);
    o.path_val_sequences.push_back(n);
  }
  return o;
}

}  // namespace atl::core
