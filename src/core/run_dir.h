// The run directory runs/<name>/: resolved config.yaml, metrics.jsonl, summary.json.
// Files are written whole (temp file + rename; a failed write leaves no temp file), except
// metrics.jsonl which is appended one whole record at a time, so a killed run leaves every
// completed record readable and a failed append (disk full) leaves no torn line.
// summary.json is the run's last output: it is written after final_params.bin, and its
// "status" says how the run ended (docs/metrics.md "summary.json").
#pragma once

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "src/config/config.h"
#include "src/core/json.h"

namespace atl::core {

// A run output (metrics.jsonl, summary.json, final_params.bin, a checkpoint under
// checkpoint.on_failure: stop) that could not be written: the run ends with this error.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

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
  // The length of metrics.jsonl: every record written so far. Thread-safe.
  uint64_t metrics_bytes();
  const std::string& path() const { return path_; }
  // What a record that cannot be appended does (run.metrics_on_failure).
  enum class OnFailure { kStop, kWarn };
  void set_on_failure(OnFailure f) { on_failure_ = f; }
  // Appends one JSON object as a line to metrics.jsonl, whole or not at all: a write that
  // fails part-way is cut back off the file. The first failure is logged at once (one line);
  // with kStop it and every record after it throw OutputError, with kWarn the records are
  // dropped and counted. Thread-safe.
  void record(const std::string& json_line);
  // Records that could not be written (kWarn), and the first failure's words ("" if none).
  uint64_t records_lost();
  std::string first_failure();
  // Writes summary.json atomically.
  void write_summary(const std::string& json);

 private:
  void open_metrics(const std::string& file, bool append);

  std::string path_;
  int metrics_fd_ = -1;
  uint64_t metrics_size_ = 0;
  OnFailure on_failure_ = OnFailure::kStop;
  uint64_t lost_ = 0;
  std::string failure_;
  std::mutex mu_;
};

RunDir::OnFailure metrics_on_failure(const config::Config& config);

// How a run ended and what it asked of the disk: summary.json's "status" and counts
// (docs/metrics.md "summary.json"), written by the simulator and the coordinator alike.
struct RunOutcome {
  std::string status = "finished";  // finished | diverged | failed
  std::string error;                // failed: why, one line
  bool checkpoints = false;         // checkpoint.every > 0: the counts below are written
  int64_t checkpoints_asked = 0;    // checkpoint cuts the run reached and tried to write
  int64_t checkpoints_written = 0;  // ... and wrote whole (every file of the cut)
  uint64_t records_lost = 0;        // records metrics.jsonl could not take (metrics_on_failure: warn)
  std::string records_failure;      // the first such failure's words
};
void add_outcome(JsonObject& summary, const RunOutcome& outcome);
// The end line's words on what was not written, e.g. "; checkpoints: 2 of 6 written; 14
// records not written to metrics.jsonl"; the checkpoint count whenever checkpoints were asked.
std::string outcome_note(const RunOutcome& outcome);

// Identity of a resolved config: 16 hex digits of the xxh64 of its "section.key: value" lines
// (config::flatten_yaml of to_yaml(config, YamlKeys::kAll)) that differ from the defaults', so
// that it does not change when config.yaml leaves out other algorithms' keys, nor when a newer
// atoll adds a key (a config that does not set it keeps its hash). summary.json carries it as
// "config_hash"; `atoll sweep` skips a run whose summary has its hash.
std::string config_hash(const config::Config& config);

// Writes `content` to `path` via a temporary file, fsync and rename. On failure the temporary
// file is removed, `path` is as it was, and OutputError names the file and the reason.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace atl::core
