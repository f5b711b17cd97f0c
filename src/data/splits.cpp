// load_splits(): which file each split comes from, and how validation is held out when no
// separate validation file is given.
//
// Language models (text, tokens): the windows are grouped into blocks of B consecutive
// windows and every k-th block (the middle one of each group of k, k = round(1 /
// val_fraction), at least 2) goes to validation. Holding out the end of the file instead
// would validate a KJV model on Revelation only; evenly spaced blocks sample the whole
// corpus, while the training windows stay in file order, so `contiguous` shards still get
// different parts of it (island 0 starts with Genesis). B = 64 windows, smaller for short
// files (B = W / (4k), at least 1) so that there are always several validation blocks.
//
// Classification (idx, synthetic): a seeded random val_fraction of the rows (rounded, at
// least one), both splits kept in original row order.
//
// val_fraction = 0 with no val_path gives an empty validation split.
//
// data.normalize standardises classification features with the statistics of the training
// split as held out here (never the validation rows): src/data/normalize.h.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/base/status.h"
#include "src/data/dataset.h"
#include "src/data/readers.h"
#include "src/data/rng.h"
#include "src/data/kinds.h"

namespace atl::data {

namespace {

constexpr int64_t kMaxHoldOutBlock = 64;  // windows per hold-out block (KJV, T=128: ~8 KB)

void check_val_fraction(double f) {
  if (!(f >= 0.0 && f < 1.0)) {
    throw UserError("data.val_fraction: must be in [0, 1), got " + std::to_string(f));
  }
}

// Window indices [0, windows) split into (train, val) as described above.
std::pair<std::vector<int64_t>, std::vector<int64_t>> hold_out_blocks(int64_t windows,
                                                                     double val_fraction) {
  std::vector<int64_t> train, val;
  if (val_fraction <= 0.0) {
    train.resize(static_cast<size_t>(windows));
    std::iota(train.begin(), train.end(), int64_t{0});
    return {train, val};
  }
  const int64_t k = std::max<int64_t>(2, std::llround(1.0 / val_fraction));
  const int64_t block = std::clamp<int64_t>(windows / (4 * k), 1, kMaxHoldOutBlock);
  for (int64_t w = 0; w < windows; ++w) {
    ((w / block) % k == k / 2 ? val : train).push_back(w);
  }
  if (val.empty() && windows >= 2) {  // fewer than k / 2 + 1 blocks: take the middle window
    const int64_t mid = windows / 2;
    val.push_back(mid);
    train.erase(std::find(train.begin(), train.end(), mid));
  }
  return {train, val};
}

std::vector<int64_t> window_starts(const std::vector<int64_t>& windows, int seq_len) {
  std::vector<int64_t> starts;
  starts.reserve(windows.size());
  for (int64_t w : windows) starts.push_back(w * (static_cast<int64_t>(seq_len) + 1));
  return starts;
}

using StreamReader = std::shared_ptr<TokenStream> (*)(const std::string& path, const std::string& key);

int64_t checked_windows(const TokenStream& stream, int seq_len, const std::string& path,
                        const std::string& key, int64_t at_least) {
  const int64_t windows = window_count(stream.size(), seq_len);
  if (windows < at_least) {
    throw UserError(key + ": '" + path + "' has " + std::to_string(stream.size()) +
                    " tokens: " + std::to_string(windows) + " windows of model.seq_len + 1 = " +
                    std::to_string(seq_len + 1) + ", need at least " + std::to_string(at_least) +
                    (at_least > 1 ? " to hold out validation (or set data.val_path)" : ""));
  }
  return windows;
}

Splits load_language_model(const config::DataConfig& config, int seq_len, StreamReader read_stream) {
  if (seq_len < 1) throw UserError("model.seq_len: must be >= 1, got " + std::to_string(seq_len));
  if (config.normalize != "none") {
    throw UserError("data.normalize: standardises image or feature data (data.kind idx or synthetic); "
                    "data.kind '" + config.kind + "' is tokens");
  }
  std::shared_ptr<const TokenStream> train = read_stream(config.path, "data.path");
  if (!config.val_path.empty()) {
    std::shared_ptr<const TokenStream> val = read_stream(config.val_path, "data.val_path");
    const int64_t train_windows = checked_windows(*train, seq_len, config.path, "data.path", 1);
    const int64_t val_windows = checked_windows(*val, seq_len, config.val_path, "data.val_path", 1);
    std::vector<int64_t> train_ids(static_cast<size_t>(train_windows));
    std::vector<int64_t> val_ids(static_cast<size_t>(val_windows));
    std::iota(train_ids.begin(), train_ids.end(), int64_t{0});
    std::iota(val_ids.begin(), val_ids.end(), int64_t{0});
    const int vocab = std::max(train->vocab, val->vocab);
    return {std::make_shared<LmDataset>(train, window_starts(train_ids, seq_len), seq_len, vocab,
                                        "train"),
            std::make_shared<LmDataset>(val, window_starts(val_ids, seq_len), seq_len, vocab,
                                        "val"), {}};
  }
  check_val_fraction(config.val_fraction);
  const int64_t windows = checked_windows(*train, seq_len, config.path, "data.path",
                                          config.val_fraction > 0.0 ? 2 : 1);
  auto [train_ids, val_ids] = hold_out_blocks(windows, config.val_fraction);
  return {std::make_shared<LmDataset>(train, window_starts(train_ids, seq_len), seq_len,
                                      train->vocab, "train"),
          std::make_shared<LmDataset>(train, window_starts(val_ids, seq_len), seq_len,
                                      train->vocab, "val (held out)"), {}};
}

int max_label_plus_one(const std::vector<int64_t>& labels) {
  int64_t max_label = 0;
  for (int64_t label : labels) max_label = std::max(max_label, label);
  return static_cast<int>(max_label) + 1;
}

// Images and labels from a pair of IDX files, checked against each other.
std::pair<at::Tensor, std::vector<int64_t>> read_idx_pair(const std::string& images_path,
                                                          const std::string& images_key,
                                                          const std::string& labels_path,
                                                          const std::string& labels_key) {
  if (labels_path.empty()) {
    throw UserError(labels_key + ": required with data.kind idx (IDX labels for " + images_key +
                    " '" + images_path + "')");
  }
  at::Tensor images = read_idx_images(images_path, images_key);
  std::vector<int64_t> labels = read_idx_labels(labels_path, labels_key);
  if (images.size(0) != static_cast<int64_t>(labels.size())) {
    throw UserError(labels_key + ": '" + labels_path + "' has " + std::to_string(labels.size()) +
                    " labels but " + images_key + " '" + images_path + "' has " +
                    std::to_string(images.size(0)) + " images");
  }
  return {images, std::move(labels)};
}

// Seeded random hold-out of a classification data set.
Splits hold_out_rows(const ClassificationDataset& all, double val_fraction, uint64_t seed,
                     const std::string& name) {
  check_val_fraction(val_fraction);
  const int64_t n = all.size();
  int64_t n_val = 0;
  if (val_fraction > 0.0) {
    if (n < 2) {
      throw UserError("data.val_fraction: " + name + " has " + std::to_string(n) +
                      " example(s), too few to hold out validation");
    }
    n_val = std::clamp<int64_t>(std::llround(val_fraction * static_cast<double>(n)), 1, n - 1);
  }
  Rng rng(derive_seed(seed, SeedStream::kHoldOut));
  std::vector<int64_t> order = random_permutation(n, rng);
  std::vector<int64_t> val(order.begin(), order.begin() + n_val);
  std::vector<int64_t> train(order.begin() + n_val, order.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  return {all.subset(train, name + " (train)"), all.subset(val, name + " (val, held out)"), {}};
}

Splits load_idx(const config::DataConfig& config, uint64_t seed) {
  auto [images, labels] = read_idx_pair(config.path, "data.path", config.labels_path,
                                        "data.labels_path");
  if (config.val_path.empty()) {
    const int classes = max_label_plus_one(labels);
    ClassificationDataset all(images, std::move(labels), classes, "idx " + config.path);
    return hold_out_rows(all, config.val_fraction, seed, "idx " + config.path);
  }
  auto [val_images, val_labels] = read_idx_pair(config.val_path, "data.val_path",
                                                config.val_labels_path, "data.val_labels_path");
  if (val_images.size(1) != images.size(1)) {
    throw UserError("data.val_path: '" + config.val_path + "' has " +
                    std::to_string(val_images.size(1)) + " pixels per image but data.path '" +
                    config.path + "' has " + std::to_string(images.size(1)));
  }
  const int classes = std::max(max_label_plus_one(labels), max_label_plus_one(val_labels));
  return {std::make_shared<ClassificationDataset>(images, std::move(labels), classes,
                                                  "idx " + config.path),
          std::make_shared<ClassificationDataset>(val_images, std::move(val_labels), classes,
                                                  "idx " + config.val_path), {}};
}

// data.normalize: the training split's statistics, applied to both splits.
Splits standardise(Splits s, const std::string& mode) {
  auto train = std::dynamic_pointer_cast<const ClassificationDataset>(s.train);
  auto val = std::dynamic_pointer_cast<const ClassificationDataset>(s.val);
  TORCH_CHECK(train && val, "standardise: not a classification data set");
  s.normalization = fit_normalization(train->features(), mode);
  s.train = train->with_features(apply_normalization(train->features(), s.normalization));
  s.val = val->with_features(apply_normalization(val->features(), s.normalization));
  return s;
}

Splits load_classification(const config::DataConfig& config, Splits s) {
  if (config.normalize == "none") return s;
  if (config.normalize != "global" && config.normalize != "per_feature") {
    throw UserError("data.normalize: unknown '" + config.normalize + "' (valid: none, global, per_feature)");
  }
  return standardise(std::move(s), config.normalize);
}

// How each data kind (src/data/kinds.h, same order) is loaded.
struct KindRow {
  const char* name;
  Splits (*load)(const config::DataConfig& config, int seq_len, uint64_t seed);
};

const KindRow kKindRows[] = {
    {"text", [](const config::DataConfig& c, int seq_len, uint64_t) { return load_language_model(c, seq_len, read_text); }},
    {"tokens",
     [](const config::DataConfig& c, int seq_len, uint64_t) { return load_language_model(c, seq_len, read_tokens); }},
    {"idx", [](const config::DataConfig& c, int, uint64_t seed) { return load_classification(c, load_idx(c, seed)); }},
    {"synthetic",
     [](const config::DataConfig& c, int, uint64_t seed) {
       return load_classification(c, hold_out_rows(*make_synthetic(c, seed), c.val_fraction, seed, "synthetic"));
     }},
};

}  // namespace

Splits load_splits(const config::DataConfig& config, int seq_len, uint64_t seed) {
  for (const auto& row : kKindRows)
    if (config.kind == row.name) return row.load(config, seq_len, seed);
  std::string valid;
  for (const auto& k : kDataKinds) valid += (valid.empty() ? "" : ", ") + std::string(k.name);
  throw UserError("data.kind: unknown '" + config.kind + "' (valid: " + valid + ")");
}

std::vector<std::string> loader_kinds() {
  std::vector<std::string> names;
  for (const auto& row : kKindRows) names.emplace_back(row.name);
  return names;
}

}  // namespace atl::data
