// A directory of numbered checkpoints (runs/<name>/checkpoints/ by default): the files
// step-<12-digit step>.ckpt, written atomically by save(), of which the newest `keep` are
// kept. load_latest() returns the newest one that reads back whole and refuses each corrupt
// or truncated newer one with one line, falling back to the previous one
// (docs/checkpoints.md "Directory").
//
// Temporary files (.step-*.ckpt.tmp) left by a process killed mid-write are never read,
// and save() removes them.
//
// Not thread-safe: one writer per directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/checkpoint/checkpoint_file.h"

namespace atl::checkpoint {

struct Entry {
  int64_t step = 0;
  std::string path;
};

struct Loaded {
  int64_t step = 0;
  std::string path;
  Checkpoint checkpoint;
};

class CheckpointDir {
 public:
  // `keep` >= 1: how many checkpoints save() leaves (older ones are deleted).
  CheckpointDir(std::string dir, int keep);
  const std::string& path() const { return dir_; }

  // The file name of checkpoint `step`: "step-000000000100.ckpt".
  static std::string file_name(int64_t step);

  // Creates the directory if needed, writes the checkpoint of `step` atomically, then deletes
  // temporary files and all but the newest `keep` checkpoints. File-system errors are
  // returned; the checkpoints already there are then untouched.
  Status save(int64_t step, const std::vector<Section>& sections);
  // Checkpoint files present, by ascending step (a missing directory: none).
  std::vector<Entry> list() const;
  // The newest checkpoint that reads back whole. Each newer one that does not is reported
  // through `refused` (one line: "checkpoint 'PATH': truncated ...; falling back to the
  // previous one") and skipped. kNotFound when there is none to use.
  StatusOr<Loaded> load_latest(const std::function<void(const std::string&)>& refused) const;

 private:
  std::string dir_;
  int keep_;
};

}  // namespace atl::checkpoint
