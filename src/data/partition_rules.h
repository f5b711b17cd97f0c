// The partition rules that the config alone decides, for checks before any data is read
// (src/core/validate.cpp); partition() (src/data/dataset.h) enforces them again on the data.
#pragma once

#include <optional>
#include <string>

#include "src/base/status.h"
#include "src/config/config.h"

namespace atl::data {

// dirichlet and shards split by label: language-model data (kind text or tokens) has none.
// Empty when the rule holds.
std::optional<KeyProblem> check_partition(const config::DataConfig& config);

// "dirichlet needs labels (...)": the problem of partition `kind` on data without labels.
std::string needs_labels(const std::string& kind);

}  // namespace atl::data
