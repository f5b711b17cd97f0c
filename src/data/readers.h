// File readers and the synthetic generator behind load_splits(). Internal to src/data.
//
// Every reader throws atl::UserError for a missing, unreadable or malformed file, with a
// message that starts with the config key the path came from (`key`, e.g. "data.path").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "src/data/classification_dataset.h"
#include "src/data/lm_dataset.h"

namespace atl::data {

// The whole file as bytes. text_reader.cpp.
std::vector<uint8_t> read_file(const std::string& path, const std::string& key);

// kind "text": any file, one token per byte (UTF-8 or not), vocab 256. text_reader.cpp.
std::shared_ptr<TokenStream> read_text(const std::string& path, const std::string& key);

// kind "tokens": nanoGPT .bin, raw little-endian uint16 ids, no header; vocab = max id + 1.
// The size must be even and non-zero. token_reader.cpp.
std::shared_ptr<TokenStream> read_tokens(const std::string& path, const std::string& key);

// IDX (MNIST layout, big-endian header): magic 0x00000803 then dims N, rows, cols, then
// N * rows * cols unsigned bytes. Returns [N, rows * cols] float32 = byte / 255.
// idx_reader.cpp.
at::Tensor read_idx_images(const std::string& path, const std::string& key);

// IDX labels: magic 0x00000801, dim N, then N unsigned bytes. idx_reader.cpp.
std::vector<int64_t> read_idx_labels(const std::string& path, const std::string& key);

// kind "synthetic": config.synthetic_examples rows of config.synthetic_dim features,
// config.synthetic_classes balanced classes (label of row i = i % classes), drawn as
// Gaussian clusters: feature = centre[label] + N(0, 1) noise, centres ~ N(0, 1) per feature.
// Same (config, seed) -> bitwise same data. synthetic_data.cpp.
std::shared_ptr<const ClassificationDataset> make_synthetic(const config::DataConfig& config,
                                                            uint64_t seed);

}  // namespace atl::data
