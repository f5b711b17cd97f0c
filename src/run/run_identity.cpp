#include "src/run/run_identity.h"

#include <set>

namespace atl::run {

std::string run_identity(const config::Config& config) {
  static const std::set<std::string> kPerProcess = {
      "run.out_dir",       "run.threads",    "run.device",         "run.resume",         "transport.coordinator",
      "transport.host",    "transport.keys_dir", "data.path",      "data.labels_path",   "data.val_path",
      "data.val_labels_path", "model.init_from", "checkpoint.dir", "checkpoint.keep"};
  std::string out;
  for (const auto& [key, value] : config::flatten_yaml(config::to_yaml(config))) {
    if (kPerProcess.count(key) || key == "hosts" || key.rfind("hosts.", 0) == 0) continue;
    out += key + ": " + value + "\n";
  }
  return out;
}

}  // namespace atl::run
