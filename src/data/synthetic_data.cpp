// kind "synthetic": Gaussian clusters, one per class. With centres ~ N(0, I) and unit noise
// in D = 32 dimensions, centres are ~8 noise deviations apart, so a small MLP (or even a
// linear model) reaches high accuracy within a few hundred steps: enough to see that
// training works, cheap enough for unit tests. Balanced labels (i % classes) make the
// partitioners' label histograms exact.
#include <ATen/ATen.h>

#include "src/base/status.h"
#include "src/data/readers.h"
#include "src/data/rng.h"

namespace atl::data {

std::shared_ptr<const ClassificationDataset> make_synthetic(const config::DataConfig& config,
                                                            uint64_t seed) {
  const int64_t n = config.synthetic_examples;
  const int64_t dim = config.synthetic_dim;
  const int classes = config.synthetic_classes;
  if (n < 1) throw UserError("data.synthetic_examples: must be >= 1, got " + std::to_string(n));
  if (dim < 1) throw UserError("data.synthetic_dim: must be >= 1, got " + std::to_string(dim));
  if (classes < 2) {
    throw UserError("data.synthetic_classes: must be >= 2, got " + std::to_string(classes));
  }

  Rng rng(derive_seed(seed, SeedStream::kSynthetic));
  std::vector<float> centres(static_cast<size_t>(classes * dim));
  for (float& c : centres) c = static_cast<float>(rng.normal());

  at::Tensor features = at::empty({n, dim}, at::kFloat);
  float* x = features.data_ptr<float>();
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = i % classes;
    labels[static_cast<size_t>(i)] = label;
    const float* centre = centres.data() + label * dim;
    for (int64_t j = 0; j < dim; ++j) x[i * dim + j] = centre[j] + static_cast<float>(rng.normal());
  }
  return std::make_shared<ClassificationDataset>(features, std::move(labels), classes,
                                                 "synthetic (seeded Gaussian clusters)");
}

}  // namespace atl::data
