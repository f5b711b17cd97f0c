// The partition rules the config alone decides (partition_rules.h). No libtorch: the
// `atoll` front end validates configs with them.
#include "src/data/partition_rules.h"

#include "src/data/kinds.h"

namespace atl::data {

std::string needs_labels(const std::string& kind) {
  return kind + " needs labels (classification data); use iid or contiguous for language models";
}

std::optional<KeyProblem> check_partition(const config::DataConfig& config) {
  const bool by_label = config.partition == "dirichlet" || config.partition == "shards";
  if (const DataKind* kind = find_data_kind(config.kind); by_label && kind && kind->language)
    return KeyProblem{"data.partition", needs_labels(config.partition)};
  return std::nullopt;
}

}  // namespace atl::data
