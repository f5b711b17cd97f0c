// Data sets, shards and batch sampling. An island sees only its shard of the training split;
// nobody trains on the validation split.
//
// Examples are addressed by index. Language-model data sets cut the token stream into
// non-overlapping windows of seq_len + 1 tokens (input = window[:-1], target = window[1:]);
// classification data sets have one example per image/row.
//
// Window stride is seq_len + 1: windows share no token, so the pair (last token of window i,
// first token of window i+1) is never predicted (1 pair in seq_len + 1), and the tail of
// fewer than seq_len + 1 tokens is dropped. Example i starts at token i * (seq_len + 1).
//
// data.kind:
//  text       any file, one token per byte (UTF-8 or not), vocab 256; kept as uint8
//  tokens     nanoGPT .bin: raw little-endian uint16 ids; vocab = max id + 1 (over train and
//             val files); kept as uint16. Odd file sizes are refused.
//  idx        IDX (MNIST format) images (magic 0x00000803) -> float32 pixels / 255 [N, rows*cols],
//             labels (magic 0x00000801) from data.labels_path; classes = max label + 1
//  synthetic  seeded Gaussian clusters, synthetic_examples x synthetic_dim, balanced labels
//             (row i has label i % synthetic_classes); same seed -> same data
// Gathered batches are always int64 tokens / float32 features (see Batch).
//
// Every random choice (hold-out, partitions, sampling, synthetic data) uses a hand-written
// splitmix64 generator (src/data/rng.h), not <random> distributions or std::shuffle, so a
// seed gives the same result with any standard library.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "src/data/normalize.h"

namespace atl::data {

// One (micro-)batch on the CPU.
//  language model: input [B, T] int64 tokens, target [B, T] int64 tokens
//  classifier:     input [B, D] float32 features, target [B] int64 labels
struct Batch {
  at::Tensor input;
  at::Tensor target;
  // Language models: the loss scores the targets at positions [score_from, T) only (the
  // tokens before are context: data.loss_after, docs/metrics.md). 0: every target.
  int64_t score_from = 0;
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
  // data.normalize: the statistics both splits were standardised with (mode "none": not).
  Normalization normalization;
};

// Builds train/validation splits as `config.data` says. `seq_len` is the model's context
// (language models). Throws atl::UserError for missing/invalid files, naming the key.
//
// With data.val_path (and data.val_labels_path for idx) that file is the validation split.
// Otherwise val_fraction of the examples is held out:
//  text/tokens     the windows are grouped in blocks of 64 consecutive windows (fewer for
//                  short files) and the middle block of every k = round(1 / val_fraction)
//                  blocks goes to validation: validation samples the whole corpus (not just
//                  its end), and training windows stay in file order for `contiguous`.
//  idx/synthetic   a seeded random round(val_fraction * N) rows (at least 1).
// Both splits keep file/row order. val_fraction = 0 gives an empty validation split.
// data.normalize (idx, synthetic): the training split's mean and std (src/data/normalize.h),
// computed after the hold-out, standardise both splits; a language model's tokens cannot be
// (UserError naming data.normalize).
Splits load_splits(const config::DataConfig& config, int seq_len, uint64_t seed);
// The data kinds load_splits has a row for, in order (a test checks them against
// src/data/kinds.h, the table config and validation read).
std::vector<std::string> loader_kinds();

// Deterministic, disjoint shards of `train` for `islands` islands: result[i] lists the
// example indices of island i. Every index appears at most once over all shards
// (iid/contiguous/shards/dirichlet use every example exactly once). Seeded by `seed`.
// Each shard is in ascending index order and none is empty.
//  iid         seeded shuffle, then near-equal shards (the first N % islands get one more)
//  contiguous  index ranges in order, same sizes (LM: island 0 reads the start of the file)
//  dirichlet   per class, proportions ~ Dirichlet(dirichlet_alpha) over islands; an island
//              left empty takes one example from the largest island (until none is empty)
//  shards      FedAvg pathological non-IID: sort by label (stable), cut into
//              islands * shards_per_island shards, shards_per_island random ones per island;
//              when N % shards != 0 the first N % shards shards hold one extra example
// Throws atl::UserError (naming the key) for an unknown partition, islands > examples,
// dirichlet/shards on language-model data, or more shards than examples.
std::vector<std::vector<int64_t>> partition(const Dataset& train, int islands,
                                            const config::DataConfig& config, uint64_t seed);

// Endless, deterministic stream of batches over one shard: reshuffles (seeded by seed and
// epoch) at every pass. Owned by one island; not thread-safe.
// next() returns exactly batch_size examples; a batch that crosses the end of an epoch is
// completed from the next epoch's order (epoch() then reports the new epoch). The shard
// must be non-empty and inside the data set (checked; broken invariants throw c10::Error).
class Sampler {
 public:
  Sampler(std::shared_ptr<const Dataset> data, std::vector<int64_t> shard, uint64_t seed);
  Batch next(int batch_size);
  int64_t epoch() const { return epoch_; }
  int64_t shard_size() const { return static_cast<int64_t>(shard_.size()); }
  // Where the next batch starts (checkpoints): the epoch and the position in its order.
  // seek() goes back there (the epoch's order is recomputed from the seed); a position
  // outside the epoch's order is a bug (c10::Error).
  struct Position {
    int64_t epoch = 0;
    uint64_t pos = 0;
  };
  Position position() const { return {epoch_, pos_}; }
  void seek(Position p);

 private:
  std::shared_ptr<const Dataset> data_;
  std::vector<int64_t> shard_;
  std::vector<int64_t> order_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  size_t pos_ = 0;
};

// The fixed validation batches used by every evaluation (same batches every time): the
// split in a seeded random order, cut into batches of batch_size, at most max_batches of
// them. 0 = the whole split: every example exactly once, the last batch holding the
// N % batch_size left over (Fashion-MNIST's 10,000 test images at batch 64: 156 batches of
// 64 and one of 16). A split smaller than one batch gives one batch of all its examples; an
// empty split, no batches.
std::vector<Batch> validation_batches(const Dataset& val, int batch_size, int max_batches,
                                      uint64_t seed);
// The examples those batches hold, in their order (batch b = [b * batch_size, ...)).
std::vector<int64_t> validation_indices(const Dataset& val, int batch_size, int max_batches, uint64_t seed);

}  // namespace atl::data
