// What a real run's summary.json says, gathered by the coordinator from the islands' (and its
// server role's) records as they arrive. docs/metrics.md describes the fields.
//
// Eval records: the first record of a step is kept and later ones are refused (the lead may
// die between recording a step and marking it in the store, and the next island evaluates it
// again: src/core/eval_role.h); steps may arrive out of order when the lead role moves, so the
// latest eval is the one of the highest step. final_val_loss is the eval at the step the run
// ended on, or null.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "src/core/eval_summary.h"
#include "src/core/json.h"

namespace atl::run {

class RunTotals {
 public:
  // Takes one record (a JSON object). False for a record that must not be written: a second
  // eval record of a step. Several paths: when a path_eval record completes its step, `routed` (if
  // not null) receives the routed eval record (docs/metrics.md "path_eval"), to be
  // written after this one and add()ed in turn; else it is cleared.
  bool add(const std::string& json, std::string* routed = nullptr);
  bool evaluated(int64_t step) const;
  int finished() const;  // island_end records

  // Appends steps, rounds, islands_finished, final_val_loss, last_val_loss, last_eval_step,
  // best_val_loss, final_val_accuracy (classifiers), bytes_sent_total, bytes_recv_total and
  // compression_ratio to `s`. `final_step`: the step whose eval is the final one (the server
  // role's last round), or -1: the last step of the islands that finished.
  void add_summary(core::JsonObject& s, int64_t final_step, bool classifier) const;

 private:
  mutable std::mutex mu_;
  core::EvalSummary evals_;  // the eval records in metrics.jsonl
  uint64_t bytes_sent_ = 0, bytes_recv_ = 0, raw_sent_ = 0;
  int64_t steps_ = 0, rounds_ = 0;
  int finished_ = 0;
};

}  // namespace atl::run
