// The run directory runs/<name>/: resolved config.yaml, metrics.jsonl, summary.json.
// Files are written whole (temp file + rename), except metrics.jsonl which is appended
// line by line and flushed, so a killed run leaves every completed record readable.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "src/config/config.h"

namespace atl::core {

// Creates <out_dir>/<name>/ and writes config.yaml. An existing directory is an
// atl::UserError unless `force` (then its files are replaced).
class RunDir {
 public:
  RunDir(const config::Config& config, bool force);
  // Continues the run directory of `config` from a checkpoint (docs/checkpoints.md
  // "Resuming"): metrics.jsonl is cut to its first `metrics_bytes` bytes (the records up to
  // the checkpoint) and appended to from there; config.yaml is written again; summary.json
  // and final_params.bin of an earlier end are removed (the run writes them at its end). An
  // atl::UserError when metrics.jsonl is missing or shorter than that.
  struct Continue {
    uint64_t metrics_bytes = 0;
  };
  RunDir(const config::Config& config, Continue at);
  ~RunDir();
  // The length of metrics.jsonl: every record written so far (each is flushed). Thread-safe.
  uint64_t metrics_bytes();
  const std::string& path() const { return path_; }
  // Appends one JSON object as a line to metrics.jsonl. Thread-safe.
  void record(const std::string& json_line);
  // Writes summary.json atomically.
  void write_summary(const std::string& json);

 private:
  std::string path_;
  std::FILE* metrics_ = nullptr;
  std::mutex mu_;
};

// Identity of a resolved config: 16 hex digits of xxh64(to_yaml(config)). summary.json
// carries it as "config_hash"; `atoll sweep` skips a run whose summary has its hash.
std::string config_hash(const config::Config& config);

// Writes `content` to `path` via a temporary file, fsync and rename.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace atl::core
