// Readers and train/validation splits: text, tokens, IDX (handmade, corrupt and the real
// Fashion-MNIST), synthetic data, and the language-model hold-out.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include "src/data/dataset.h"
#include "src/data/kinds.h"
#include "src/data/lm_dataset.h"
#include "tests/data/test_util.h"

namespace atl::data {
namespace {

using testing::expect_user_error;
using testing::TempDir;
using testing::write_bytes;

config::DataConfig text_config(const std::string& path, double val_fraction) {
  config::DataConfig c;
  c.kind = "text";
  c.path = path;
  c.val_fraction = val_fraction;
  return c;
}

std::vector<uint8_t> pattern_bytes(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>((i * 7 + i / 251) % 256);
  return bytes;
}

const LmDataset& as_lm(const Dataset& d) {
  const auto* lm = dynamic_cast<const LmDataset*>(&d);
  if (lm == nullptr) throw std::runtime_error("not an LmDataset");
  return *lm;
}

// The data registry's two halves agree: every kind the config accepts (src/data/kinds.h) has
// its loader row (src/data/splits.cpp), in the same order.
TEST(DataKinds, EveryKindHasItsLoaderRow) {
  EXPECT_EQ(loader_kinds(), data_kind_names());
  EXPECT_EQ(find_data_kind("csv"), nullptr);
}

TEST(TextData, WindowsShiftInputAndTargetByOne) {
  TempDir dir;
  const std::vector<uint8_t> bytes = pattern_bytes(1000);
  write_bytes(dir.file("t.txt"), bytes);
  const int seq_len = 8;
  Splits s = load_splits(text_config(dir.file("t.txt"), 0.0), seq_len, 1);
  ASSERT_EQ(s.train->size(), 1000 / 9);
  EXPECT_EQ(s.val->size(), 0);
  EXPECT_EQ(s.train->vocab_size(), 256);
  EXPECT_EQ(s.train->num_classes(), 0);
  EXPECT_EQ(s.train->input_dim(), 0);
  EXPECT_TRUE(s.train->labels().empty());

  const std::vector<int64_t> ids = {0, 5, 110};
  Batch b = s.train->gather(ids);
  ASSERT_EQ(b.input.sizes(), (at::IntArrayRef{3, seq_len}));
  ASSERT_EQ(b.target.sizes(), (at::IntArrayRef{3, seq_len}));
  EXPECT_EQ(b.input.scalar_type(), at::kLong);
  EXPECT_EQ(b.target.scalar_type(), at::kLong);
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t start = ids[r] * (seq_len + 1);  // non-overlapping windows of seq_len + 1
    for (int t = 0; t < seq_len; ++t) {
      EXPECT_EQ(b.input[r][t].item<int64_t>(), bytes[start + t]);
      EXPECT_EQ(b.target[r][t].item<int64_t>(), bytes[start + t + 1]);
    }
  }
}

TEST(TextData, AnyBytesAreTokens) {
  TempDir dir;
  const std::vector<uint8_t> bytes = {0xff, 0x00, 0xc3, 0x28, 0x80, 0x0a, 0xfe, 0x01, 0x7f};
  write_bytes(dir.file("bin.txt"), bytes);  // not valid UTF-8
  Splits s = load_splits(text_config(dir.file("bin.txt"), 0.0), 8, 1);
  ASSERT_EQ(s.train->size(), 1);
  Batch b = s.train->gather({0});
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(b.input[0][t].item<int64_t>(), bytes[t]);
    EXPECT_EQ(b.target[0][t].item<int64_t>(), bytes[t + 1]);
  }
}

TEST(TextData, MissingOrShortFileIsUserError) {
  TempDir dir;
  expect_user_error([&] { load_splits(text_config(dir.file("nope.txt"), 0.05), 8, 1); },
                    {"data.path", "nope.txt", "does not exist"});
  write_bytes(dir.file("short.txt"), pattern_bytes(8));
  expect_user_error([&] { load_splits(text_config(dir.file("short.txt"), 0.0), 8, 1); },
                    {"data.path", "short.txt", "windows"});
  // One window is enough to train but not to hold out validation.
  write_bytes(dir.file("one.txt"), pattern_bytes(12));
  expect_user_error([&] { load_splits(text_config(dir.file("one.txt"), 0.05), 8, 1); },
                    {"data.path", "val_path"});
  config::DataConfig bad = text_config(dir.file("one.txt"), 0.0);
  bad.kind = "csv";
  expect_user_error([&] { load_splits(bad, 8, 1); }, {"data.kind", "csv", "synthetic"});
}

TEST(TokenData, ReadsLittleEndianUint16) {
  TempDir dir;
  std::vector<uint16_t> ids;
  for (int i = 0; i < 60; ++i) ids.push_back(static_cast<uint16_t>((i * 977) % 50000));
  ids[17] = 50256;  // GPT-2's <|endoftext|>, the largest id
  std::vector<uint8_t> bytes;
  for (uint16_t id : ids) {
    bytes.push_back(static_cast<uint8_t>(id & 0xff));
    bytes.push_back(static_cast<uint8_t>(id >> 8));
  }
  write_bytes(dir.file("train.bin"), bytes);
  std::vector<uint8_t> val_bytes = {0x10, 0x00, 0x11, 0x00, 0x12, 0x00, 0x13, 0x00, 0x14, 0x00,
                                    0x10, 0xc4};  // last id 0xc410 = 50192
  write_bytes(dir.file("val.bin"), val_bytes);

  config::DataConfig c;
  c.kind = "tokens";
  c.path = dir.file("train.bin");
  c.val_path = dir.file("val.bin");
  const int seq_len = 5;
  Splits s = load_splits(c, seq_len, 3);
  ASSERT_EQ(s.train->size(), 10);
  ASSERT_EQ(s.val->size(), 1);
  EXPECT_EQ(s.train->vocab_size(), 50257);
  EXPECT_EQ(s.val->vocab_size(), 50257);
  Batch b = s.train->gather({2, 3});
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < seq_len; ++t) {
      EXPECT_EQ(b.input[r][t].item<int64_t>(), ids[(2 + r) * 6 + t]);
      EXPECT_EQ(b.target[r][t].item<int64_t>(), ids[(2 + r) * 6 + t + 1]);
    }
  }
  Batch v = s.val->gather({0});
  EXPECT_EQ(v.input[0][0].item<int64_t>(), 0x10);
  EXPECT_EQ(v.target[0][4].item<int64_t>(), 0xc410);

  bytes.push_back(0);
  write_bytes(dir.file("odd.bin"), bytes);
  c.path = dir.file("odd.bin");
  expect_user_error([&] { load_splits(c, seq_len, 3); }, {"data.path", "odd size"});
  c.path = dir.file("train.bin");
  c.val_path = dir.file("missing.bin");
  expect_user_error([&] { load_splits(c, seq_len, 3); }, {"data.val_path", "missing.bin"});
}

// A 5-image, 2x3 IDX pair written by hand.
struct SmallIdx {
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels = {3, 0, 1, 3, 2};
  SmallIdx() {
    for (int i = 0; i < 30; ++i) pixels.push_back(static_cast<uint8_t>(i * 8 + 7));
  }
};

config::DataConfig idx_config(const TempDir& dir) {
  config::DataConfig c;
  c.kind = "idx";
  c.path = dir.file("images");
  c.labels_path = dir.file("labels");
  c.val_fraction = 0.0;
  return c;
}

TEST(IdxData, ReadsHandmadeFile) {
  TempDir dir;
  SmallIdx idx;
  write_bytes(dir.file("images"), testing::idx_images(5, 2, 3, idx.pixels));
  write_bytes(dir.file("labels"), testing::idx_labels(idx.labels));
  Splits s = load_splits(idx_config(dir), 0, 1);
  ASSERT_EQ(s.train->size(), 5);
  EXPECT_EQ(s.val->size(), 0);
  EXPECT_EQ(s.train->input_dim(), 6);
  EXPECT_EQ(s.train->num_classes(), 4);
  EXPECT_EQ(s.train->vocab_size(), 0);
  EXPECT_EQ(s.train->labels(), (std::vector<int64_t>{3, 0, 1, 3, 2}));
  Batch b = s.train->gather({4, 1});
  ASSERT_EQ(b.input.sizes(), (at::IntArrayRef{2, 6}));
  EXPECT_EQ(b.input.scalar_type(), at::kFloat);
  EXPECT_EQ(b.target.scalar_type(), at::kLong);
  EXPECT_EQ(b.target[0].item<int64_t>(), 2);
  EXPECT_EQ(b.target[1].item<int64_t>(), 0);
  for (int j = 0; j < 6; ++j) {
    EXPECT_FLOAT_EQ(b.input[0][j].item<float>(), idx.pixels[4 * 6 + j] / 255.0f);
    EXPECT_FLOAT_EQ(b.input[1][j].item<float>(), idx.pixels[1 * 6 + j] / 255.0f);
  }
}

TEST(IdxData, CorruptFilesAreUserErrors) {
  TempDir dir;
  SmallIdx idx;
  const std::vector<uint8_t> good_images = testing::idx_images(5, 2, 3, idx.pixels);
  const std::vector<uint8_t> good_labels = testing::idx_labels(idx.labels);
  const config::DataConfig c = idx_config(dir);
  auto load = [&] { load_splits(c, 0, 1); };

  // Labels given as images and vice versa: wrong magic.
  write_bytes(dir.file("images"), good_labels);
  write_bytes(dir.file("labels"), good_labels);
  expect_user_error(load, {"data.path", "is not an IDX image file", "0x00000801"});
  write_bytes(dir.file("images"), good_images);
  write_bytes(dir.file("labels"), good_images);
  expect_user_error(load, {"data.labels_path", "is not an IDX label file", "0x00000803"});

  // Truncated pixels, truncated header, trailing bytes.
  write_bytes(dir.file("labels"), good_labels);
  write_bytes(dir.file("images"), std::vector<uint8_t>(good_images.begin(), good_images.end() - 1));
  expect_user_error(load, {"data.path", "truncated", "5 x 2 x 3"});
  write_bytes(dir.file("images"), std::vector<uint8_t>(good_images.begin(), good_images.begin() + 10));
  expect_user_error(load, {"data.path", "truncated"});
  std::vector<uint8_t> longer = good_images;
  longer.push_back(0);
  write_bytes(dir.file("images"), longer);
  expect_user_error(load, {"data.path", "trailing"});
  write_bytes(dir.file("images"), {0x00, 0x00});
  expect_user_error(load, {"data.path", "not an IDX image file"});
  // A header that claims far more than the file holds (no overflow, no huge allocation).
  write_bytes(dir.file("images"), testing::idx_images(0xffffffffu, 0xffffffffu, 0xffffffffu, {1}));
  expect_user_error(load, {"data.path", "truncated"});

  // Count mismatch between images and labels.
  write_bytes(dir.file("images"), good_images);
  write_bytes(dir.file("labels"), testing::idx_labels({1, 2, 3, 4}));
  expect_user_error(load, {"data.labels_path", "4 labels", "5 images"});

  // Labels file missing from the config; validation images without labels.
  config::DataConfig no_labels = c;
  no_labels.labels_path.clear();
  expect_user_error([&] { load_splits(no_labels, 0, 1); }, {"data.labels_path", "required"});
  write_bytes(dir.file("labels"), good_labels);
  config::DataConfig val_only = c;
  val_only.val_path = dir.file("images");
  expect_user_error([&] { load_splits(val_only, 0, 1); }, {"data.val_labels_path", "required"});
}

// data.normalize on a handmade IDX pair with a separate validation file: the statistics
// come from the training file only and standardise both; a constant pixel is only centred.
TEST(IdxData, NormalizeUsesTrainingStatisticsOnly) {
  TempDir dir;
  // 4 training images of 1x3 pixels: pixel 0 varies, pixel 1 varies, pixel 2 is constant.
  const std::vector<uint8_t> train = {0, 10, 50, 51, 20, 50, 102, 30, 50, 153, 40, 50};
  const std::vector<uint8_t> val = {255, 0, 200, 0, 90, 50};  // 2 images, other statistics
  write_bytes(dir.file("images"), testing::idx_images(4, 1, 3, train));
  write_bytes(dir.file("labels"), testing::idx_labels({0, 1, 0, 1}));
  write_bytes(dir.file("val_images"), testing::idx_images(2, 1, 3, val));
  write_bytes(dir.file("val_labels"), testing::idx_labels({1, 0}));
  config::DataConfig c = idx_config(dir);
  c.val_path = dir.file("val_images");
  c.val_labels_path = dir.file("val_labels");

  c.normalize = "per_feature";
  Splits s = load_splits(c, 0, 1);
  ASSERT_EQ(s.normalization.mode, "per_feature");
  ASSERT_EQ(s.normalization.mean.size(), 3u);
  EXPECT_EQ(s.normalization.examples, 4);
  // Expected statistics from the training pixels, in double (population std).
  for (int j = 0; j < 3; ++j) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += train[i * 3 + j] / 255.0f / 4.0;
    for (int i = 0; i < 4; ++i) var += std::pow(train[i * 3 + j] / 255.0f - mean, 2) / 4.0;
    const double sd = j == 2 ? 1.0 : std::sqrt(var);  // constant pixel: centred only
    EXPECT_NEAR(s.normalization.mean[j], mean, 1e-12) << j;
    EXPECT_NEAR(s.normalization.stddev[j], sd, 1e-12) << j;
    const Batch t = s.train->gather({0, 1, 2, 3});
    const Batch v = s.val->gather({0, 1});
    for (int i = 0; i < 4; ++i)
      EXPECT_FLOAT_EQ(t.input[i][j].item<float>(), (train[i * 3 + j] / 255.0f - static_cast<float>(mean)) /
                                                       static_cast<float>(sd));
    for (int i = 0; i < 2; ++i)  // the validation images with the TRAINING statistics
      EXPECT_FLOAT_EQ(v.input[i][j].item<float>(), (val[i * 3 + j] / 255.0f - static_cast<float>(mean)) /
                                                       static_cast<float>(sd));
  }
  const Batch all = s.train->gather({0, 1, 2, 3});
  EXPECT_NEAR(all.input.select(1, 0).mean().item<float>(), 0.0f, 1e-6);
  EXPECT_NEAR(all.input.select(1, 0).std(/*unbiased=*/false).item<float>(), 1.0f, 1e-5);
  EXPECT_EQ(s.train->labels(), (std::vector<int64_t>{0, 1, 0, 1}));  // labels untouched
  const std::string json = normalization_json(s.normalization, 3);
  EXPECT_NE(json.find("\"mode\":\"per_feature\",\"train_examples\":4,\"features\":3,\"mean\":["), std::string::npos)
      << json;

  c.normalize = "global";
  Splits g = load_splits(c, 0, 1);
  ASSERT_EQ(g.normalization.mean.size(), 1u);
  double mean = 0, var = 0;
  for (uint8_t p : train) mean += p / 255.0f / 12.0;
  for (uint8_t p : train) var += std::pow(p / 255.0f - mean, 2) / 12.0;
  EXPECT_NEAR(g.normalization.mean[0], mean, 1e-12);
  EXPECT_NEAR(g.normalization.stddev[0], std::sqrt(var), 1e-12);
  EXPECT_FLOAT_EQ(g.val->gather({1}).input[0][2].item<float>(),
                  (50 / 255.0f - static_cast<float>(mean)) / static_cast<float>(std::sqrt(var)));

  c.normalize = "none";
  Splits plain = load_splits(c, 0, 1);
  EXPECT_FALSE(plain.normalization.enabled());
  EXPECT_FLOAT_EQ(plain.train->gather({1}).input[0][0].item<float>(), 51 / 255.0f);
}

// The held-out validation rows of one file take no part in the statistics.
TEST(SyntheticData, NormalizeFitsTheHeldOutTrainingRowsOnly) {
  config::DataConfig c = testing::synthetic_config(400, 5, 4);
  c.val_fraction = 0.25;
  c.normalize = "per_feature";
  Splits s = load_splits(c, 0, 3);
  ASSERT_EQ(s.train->size(), 300);
  std::vector<int64_t> rows(300);
  std::iota(rows.begin(), rows.end(), 0);
  const at::Tensor t = s.train->gather(rows).input.to(at::kDouble);
  EXPECT_LT(t.mean(0).abs().max().item<double>(), 1e-6);
  EXPECT_LT((t.std(0, /*unbiased=*/false) - 1).abs().max().item<double>(), 1e-5);
  std::vector<int64_t> vrows(100);
  std::iota(vrows.begin(), vrows.end(), 0);
  const at::Tensor v = s.val->gather(vrows).input.to(at::kDouble);
  EXPECT_GT(v.mean(0).abs().max().item<double>(), 1e-4);  // not fitted on these
}

TEST(TextData, NormalizeIsRefusedWithOneLine) {
  TempDir dir;
  write_bytes(dir.file("t.txt"), pattern_bytes(400));
  config::DataConfig c = text_config(dir.file("t.txt"), 0.0);
  c.normalize = "global";
  expect_user_error([&] { load_splits(c, 8, 1); }, {"data.normalize", "idx or synthetic", "'text'"});
  try {
    config::parse_config("data:\n  kind: tokens\n  normalize: per_feature\n", "n.yaml");
    ADD_FAILURE() << "data.normalize with tokens accepted";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("n.yaml:3: key 'data.normalize'"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  EXPECT_EQ(config::parse_config("data: {kind: idx, normalize: global}\n", "ok.yaml").data.normalize, "global");
  expect_user_error([] { config::parse_config("data: {kind: idx, normalize: minmax}\n", "bad.yaml"); },
                    {"data.normalize", "per_feature"});
}

TEST(IdxData, FashionMnistLoads) {
  const std::string root = "data/fashion-mnist/";
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    if (!std::filesystem::exists(root + f)) GTEST_SKIP() << root << f << " missing (scripts/prepare_data.sh)";
  }
  config::DataConfig c;
  c.kind = "idx";
  c.path = root + "train-images-idx3-ubyte";
  c.labels_path = root + "train-labels-idx1-ubyte";
  c.val_path = root + "t10k-images-idx3-ubyte";
  c.val_labels_path = root + "t10k-labels-idx1-ubyte";
  Splits s = load_splits(c, 0, 1);
  ASSERT_EQ(s.train->size(), 60000);
  ASSERT_EQ(s.val->size(), 10000);
  EXPECT_EQ(s.train->input_dim(), 784);
  EXPECT_EQ(s.val->input_dim(), 784);
  EXPECT_EQ(s.train->num_classes(), 10);
  std::vector<int> histogram(10, 0);
  for (int64_t label : s.train->labels()) ++histogram[static_cast<size_t>(label)];
  for (int count : histogram) EXPECT_EQ(count, 6000);
  Batch b = s.val->gather({0, 9999});
  EXPECT_GE(b.input.min().item<float>(), 0.0f);
  EXPECT_LE(b.input.max().item<float>(), 1.0f);
  EXPECT_GT(b.input.max().item<float>(), 0.5f);
}

TEST(SyntheticData, DeterministicBalancedAndLearnable) {
  config::DataConfig c = testing::synthetic_config(1000, 16, 4);
  c.val_fraction = 0.2;
  Splits a = load_splits(c, 0, 7);
  Splits b = load_splits(c, 0, 7);
  Splits other = load_splits(c, 0, 8);
  ASSERT_EQ(a.train->size(), 800);
  ASSERT_EQ(a.val->size(), 200);
  EXPECT_EQ(a.train->input_dim(), 16);
  EXPECT_EQ(a.train->num_classes(), 4);
  std::vector<int64_t> all(800);
  std::iota(all.begin(), all.end(), 0);
  const Batch ta = a.train->gather(all);
  EXPECT_TRUE(ta.input.equal(b.train->gather(all).input));
  EXPECT_TRUE(ta.target.equal(b.train->gather(all).target));
  EXPECT_FALSE(ta.input.equal(other.train->gather(all).input));

  // Nearest class mean, fitted on train, must classify validation well: an MLP can learn it.
  at::Tensor means = at::zeros({4, 16});
  for (int k = 0; k < 4; ++k) means[k] = ta.input.index({ta.target == k}).mean(0);
  std::vector<int64_t> val_ids(200);
  std::iota(val_ids.begin(), val_ids.end(), 0);
  const Batch va = a.val->gather(val_ids);
  at::Tensor predicted = at::cdist(va.input, means).argmin(1);
  const double accuracy = predicted.eq(va.target).to(at::kDouble).mean().item<double>();
  EXPECT_GT(accuracy, 0.9);
}

// Hold-out on a synthetic text: validation windows are disjoint from training windows, the
// two cover every window, and validation is spread over the whole file.
TEST(HoldOut, LanguageModelBlocksSpreadOverTheFile) {
  TempDir dir;
  write_bytes(dir.file("corpus.txt"), pattern_bytes(100000));
  const int seq_len = 15;  // 16-token windows -> 6250 windows; k = 20, blocks of 64 windows
  Splits s = load_splits(text_config(dir.file("corpus.txt"), 0.05), seq_len, 1);
  const LmDataset& train = as_lm(*s.train);
  const LmDataset& val = as_lm(*s.val);
  EXPECT_EQ(train.size() + val.size(), 6250);
  EXPECT_NEAR(static_cast<double>(val.size()) / 6250.0, 0.05, 0.01);
  std::set<int64_t> starts;
  for (int64_t i = 0; i < train.size(); ++i) {
    starts.insert(train.window_start(i));
    if (i > 0) {
      EXPECT_LT(train.window_start(i - 1), train.window_start(i));  // file order
    }
  }
  for (int64_t i = 0; i < val.size(); ++i) {
    EXPECT_TRUE(starts.insert(val.window_start(i)).second) << "val window also in train";
    EXPECT_EQ(val.window_start(i) % (seq_len + 1), 0);
  }
  EXPECT_EQ(static_cast<int64_t>(starts.size()), 6250);
  // Spread: the first validation window lies in the first eighth, the last in the last one,
  // and no gap is longer than one group of k blocks.
  EXPECT_LT(val.window_start(0), 100000 / 8);
  EXPECT_GT(val.window_start(val.size() - 1), 100000 * 7 / 8);
  for (int64_t i = 1; i < val.size(); ++i) {
    EXPECT_LE(val.window_start(i) - val.window_start(i - 1), 20 * 64 * 16);
  }
  // Same data with the same or another seed: the hold-out does not depend on the seed.
  Splits again = load_splits(text_config(dir.file("corpus.txt"), 0.05), seq_len, 99);
  EXPECT_EQ(as_lm(*again.val).window_start(0), val.window_start(0));
}

TEST(HoldOut, ShortFileStillHoldsOutOneWindow) {
  TempDir dir;
  write_bytes(dir.file("small.txt"), pattern_bytes(5 * 9));
  Splits s = load_splits(text_config(dir.file("small.txt"), 0.05), 8, 1);
  EXPECT_EQ(s.train->size(), 4);
  EXPECT_EQ(s.val->size(), 1);
}

TEST(HoldOut, KjvValidationCoversTheWholeBible) {
  const std::string path = "data/kjv.txt";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing (scripts/prepare_data.sh)";
  const int seq_len = 128;
  Splits s = load_splits(text_config(path, 0.05), seq_len, 1);
  const LmDataset& train = as_lm(*s.train);
  const LmDataset& val = as_lm(*s.val);
  const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  EXPECT_EQ(train.size() + val.size(), bytes / (seq_len + 1));
  EXPECT_NEAR(static_cast<double>(val.size()) / (train.size() + val.size()), 0.05, 0.005);
  EXPECT_LT(val.window_start(0), bytes / 20);                  // near Genesis
  EXPECT_GT(val.window_start(val.size() - 1), bytes * 19 / 20);  // near Revelation
  // Training starts with Genesis 1:1.
  Batch first = s.train->gather({0});
  std::string text;
  for (int t = 0; t < 16; ++t) text.push_back(static_cast<char>(first.input[0][t].item<int64_t>()));
  EXPECT_EQ(text, "In the beginning");
}

}  // namespace
}  // namespace atl::data
