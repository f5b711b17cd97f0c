// Data sets, shards and batch sampling. An island sees only its shard of the training split;
// nobody trains on the validation split.
//
// Examples are addressed by index. Language-model data sets cut the token stream into
// non-overlapping windows of seq_len + 1 tokens (input = window[:-1], target = window[1:]);
// classification data sets have one example per image/row.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/config/config.h"

namespace atoll::data {

// One (micro-)batch on the CPU.
//  language model: input [B, T] int64 tokens, target [B, T] int64 tokens
//  classifier:     input [B, D] float32 features, target [B] int64 labels
struct Batch {
  at::Tensor input;
  at::Tensor target;
};

// Read-only after construction; safe to share among islands (threads).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;                 // number of examples
  virtual Batch gather(const std::vector<int64_t>& indices) const = 0;
  virtual int num_classes() const = 0;              // 0 for language models
  virtual int64_t input_dim() const = 0;            // classifier feature size; 0 for LMs
  virtual int vocab_size() const = 0;               // LM vocabulary; 0 for classifiers
  // Label of every example (classification only; empty for LMs). Used by partitioners.
  virtual const std::vector<int64_t>& labels() const = 0;
  virtual std::string describe() const = 0;         // "text data/kjv.txt: 4.1M tokens"
};

struct Splits {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> val;
};

// Builds train/validation splits as `config.data` says. `seq_len` is the model's context
// (language models). Throws atoll::UserError for missing/invalid files, naming the key.
Splits load_splits(const config::DataConfig& config, int seq_len, uint64_t seed);

// Deterministic, disjoint shards of `train` for `islands` islands: result[i] lists the
// example indices of island i. Every index appears at most once over all shards
// (iid/contiguous/shards/dirichlet use every example exactly once). Seeded by `seed`.
std::vector<std::vector<int64_t>> partition(const Dataset& train, int islands,
                                            const config::DataConfig& config, uint64_t seed);

// Endless, deterministic stream of batches over one shard: reshuffles (seeded by seed and
// epoch) at every pass. Owned by one island; not thread-safe.
class Sampler {
 public:
  Sampler(std::shared_ptr<const Dataset> data, std::vector<int64_t> shard, uint64_t seed);
  Batch next(int batch_size);
  int64_t epoch() const { return epoch_; }
  int64_t shard_size() const { return static_cast<int64_t>(shard_.size()); }

 private:
  std::shared_ptr<const Dataset> data_;
  std::vector<int64_t> shard_;
  std::vector<int64_t> order_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  size_t pos_ = 0;
};

// The fixed validation batches used by every evaluation (same batches every time).
std::vector<Batch> validation_batches(const Dataset& val, int batch_size, int max_batches,
                                      uint64_t seed);

}  // namespace atoll::data
