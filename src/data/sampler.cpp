// Sampler and validation_batches(): the order in which examples are seen.
//
// Epoch e visits the shard in the order of a Fisher-Yates shuffle seeded by
// derive_seed(seed, kSamplerEpoch, e), so any epoch's order can be recomputed without
// replaying the earlier ones. A batch that reaches the end of an epoch is completed from the
// start of the next one: every batch has exactly batch_size examples, and every example is
// seen once per epoch.
#include <algorithm>
#include <utility>

#include "src/data/dataset.h"
#include "src/data/rng.h"

namespace atl::data {

namespace {

std::vector<int64_t> epoch_order(const std::vector<int64_t>& shard, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order = shard;
  Rng rng(derive_seed(seed, SeedStream::kSamplerEpoch, static_cast<uint64_t>(epoch)));
  shuffle(order, rng);
  return order;
}

}  // namespace

Sampler::Sampler(std::shared_ptr<const Dataset> data, std::vector<int64_t> shard, uint64_t seed)
    : data_(std::move(data)), shard_(std::move(shard)), seed_(seed) {
  TORCH_CHECK(data_ != nullptr, "Sampler: null data set");
  TORCH_CHECK(!shard_.empty(), "Sampler: empty shard");
  for (int64_t i : shard_) {
    TORCH_CHECK(i >= 0 && i < data_->size(), "Sampler: shard index ", i, " outside the data set (",
                data_->size(), " examples)");
  }
  order_ = epoch_order(shard_, seed_, 0);
}

Batch Sampler::next(int batch_size) {
  TORCH_CHECK(batch_size > 0, "Sampler::next: batch_size must be positive, got ", batch_size);
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(batch_size));
  while (static_cast<int>(indices.size()) < batch_size) {
    if (pos_ == order_.size()) {
      ++epoch_;
      order_ = epoch_order(shard_, seed_, epoch_);
      pos_ = 0;
    }
    const size_t take = std::min(order_.size() - pos_, static_cast<size_t>(batch_size) - indices.size());
    indices.insert(indices.end(), order_.begin() + pos_, order_.begin() + pos_ + take);
    pos_ += take;
  }
  return data_->gather(indices);
}

void Sampler::seek(Position p) {
  TORCH_CHECK(p.epoch >= 0 && p.pos <= shard_.size(), "Sampler::seek: position ", p.pos, " of epoch ", p.epoch,
              " is outside a shard of ", shard_.size());
  if (p.epoch != epoch_) order_ = epoch_order(shard_, seed_, p.epoch);
  epoch_ = p.epoch;
  pos_ = static_cast<size_t>(p.pos);
}

std::vector<int64_t> validation_indices(const Dataset& val, int batch_size, int max_batches, uint64_t seed) {
  TORCH_CHECK(batch_size > 0, "validation_batches: batch_size must be positive, got ", batch_size);
  TORCH_CHECK(max_batches >= 0, "validation_batches: max_batches must be >= 0, got ", max_batches);
  const int64_t n = val.size();
  if (n == 0) return {};
  Rng rng(derive_seed(seed, SeedStream::kValidationOrder));
  std::vector<int64_t> order = random_permutation(n, rng);
  if (max_batches > 0) order.resize(static_cast<size_t>(std::min<int64_t>(n, int64_t{max_batches} * batch_size)));
  return order;
}

std::vector<Batch> validation_batches(const Dataset& val, int batch_size, int max_batches,
                                      uint64_t seed) {
  const std::vector<int64_t> order = validation_indices(val, batch_size, max_batches, seed);
  const int64_t n = static_cast<int64_t>(order.size());
  // Every example once: the last batch holds the n % batch_size left over (the evaluator
  // weights each batch by its examples or tokens, so a short batch counts for what it holds).
  const int64_t count = (n + batch_size - 1) / batch_size;
  std::vector<Batch> batches;
  batches.reserve(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    const auto first = order.begin() + b * batch_size;
    const auto last = order.begin() + std::min<int64_t>(n, (b + 1) * batch_size);
    batches.push_back(val.gather(std::vector<int64_t>(first, last)));
  }
  return batches;
}

}  // namespace atl::data
