#include "src/data/classification_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace atl::data {

namespace {

at::Tensor index_tensor(const std::vector<int64_t>& indices) {
  at::Tensor t = at::empty({static_cast<int64_t>(indices.size())}, at::kLong);
  std::copy(indices.begin(), indices.end(), t.data_ptr<int64_t>());
  return t;
}

}  // namespace

ClassificationDataset::ClassificationDataset(at::Tensor features, std::vector<int64_t> labels,
                                             int num_classes, std::string description)
    : features_(std::move(features)),
      labels_(std::move(labels)),
      num_classes_(num_classes),
      description_(std::move(description)) {
  if (!features_.defined() || features_.dim() != 2 || features_.scalar_type() != at::kFloat) {
    throw std::invalid_argument("ClassificationDataset: features must be a [N, D] float32 tensor");
  }
  if (features_.size(0) != static_cast<int64_t>(labels_.size())) {
    throw std::invalid_argument("ClassificationDataset: " + std::to_string(features_.size(0)) +
                                " feature rows but " + std::to_string(labels_.size()) + " labels");
  }
  if (num_classes_ < 1) throw std::invalid_argument("ClassificationDataset: num_classes < 1");
  for (int64_t label : labels_) {
    if (label < 0 || label >= num_classes_) {
      throw std::invalid_argument("ClassificationDataset: label " + std::to_string(label) +
                                  " outside [0, " + std::to_string(num_classes_) + ")");
    }
  }
  features_ = features_.contiguous();
}

Batch ClassificationDataset::gather(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) {
    TORCH_CHECK(i >= 0 && i < size(), "ClassificationDataset::gather: index ", i,
                " out of [0, ", size(), ")");
  }
  at::Tensor rows = index_tensor(indices);
  at::Tensor target = at::empty({static_cast<int64_t>(indices.size())}, at::kLong);
  int64_t* out = target.data_ptr<int64_t>();
  for (size_t b = 0; b < indices.size(); ++b) out[b] = labels_[static_cast<size_t>(indices[b])];
  return {features_.index_select(0, rows), target};
}

std::string ClassificationDataset::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), ": %lld examples x %lld features, %d classes",
                static_cast<long long>(size()), static_cast<long long>(input_dim()),
                num_classes_);
  return description_ + buf;
}

std::shared_ptr<const ClassificationDataset> ClassificationDataset::subset(
    const std::vector<int64_t>& rows, std::string description) const {
  std::vector<int64_t> labels;
  labels.reserve(rows.size());
  for (int64_t r : rows) {
    TORCH_CHECK(r >= 0 && r < size(), "ClassificationDataset::subset: row ", r, " out of range");
    labels.push_back(labels_[static_cast<size_t>(r)]);
  }
  return std::make_shared<ClassificationDataset>(features_.index_select(0, index_tensor(rows)),
                                                 std::move(labels), num_classes_,
                                                 std::move(description));
}

std::shared_ptr<const ClassificationDataset> ClassificationDataset::with_features(
    at::Tensor features, std::string description) const {
  return std::make_shared<ClassificationDataset>(std::move(features), labels_, num_classes_,
                                                 description.empty() ? description_ : std::move(description));
}

}  // namespace atl::data
