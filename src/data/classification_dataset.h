// Classification data set: a feature matrix and one label per row, in memory. Internal to
// src/data (others see it through data::Dataset or make_classification_dataset()).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "src/data/dataset.h"

namespace atl::data {

// Read-only after construction; safe to share among threads.
class ClassificationDataset final : public Dataset {
 public:
  // features [N, D] float32 (made contiguous), labels: N values in [0, num_classes).
  // Throws std::invalid_argument on inconsistent shapes or labels (callers validate user
  // files first and report UserError).
  ClassificationDataset(at::Tensor features, std::vector<int64_t> labels, int num_classes,
                        std::string description);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  // input [B, D] float32, target [B] int64.
  Batch gather(const std::vector<int64_t>& indices) const override;
  int num_classes() const override { return num_classes_; }
  int64_t input_dim() const override { return features_.size(1); }
  int vocab_size() const override { return 0; }
  const std::vector<int64_t>& labels() const override { return labels_; }
  std::string describe() const override;

  // The rows `rows` (in that order) as a new data set, with `description`.
  std::shared_ptr<const ClassificationDataset> subset(const std::vector<int64_t>& rows,
                                                      std::string description) const;
  // [N, D] float32, contiguous.
  const at::Tensor& features() const { return features_; }
  // The same labels and classes with other features ([N, D] float32, same N), and
  // `description` ("" keeps this one's).
  std::shared_ptr<const ClassificationDataset> with_features(at::Tensor features,
                                                             std::string description = "") const;

 private:
  at::Tensor features_;  // [N, D] float32, contiguous
  std::vector<int64_t> labels_;
  int num_classes_;
  std::string description_;
};

}  // namespace atl::data
