#include "src/sweep/results.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "src/core/json.h"
#include "src/core/run_dir.h"
#include "src/sweep/csv.h"

namespace fs = std::filesystem;

namespace atl::sweep {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {

double number(const std::string& json, const char* key) {
  return core::json_find_number(json, key).value_or(kUnknown);
}

// Empty for an unknown value, else the shortest exact form.
std::string cell(double v) { return std::isfinite(v) ? core::json_number(v) : ""; }

}  // namespace

const std::vector<MetricColumn>& metric_columns() {
  static const std::vector<MetricColumn> columns = {
      {"final_val_loss", &RunMetrics::final_val_loss},
      {"best_val_loss", &RunMetrics::best_val_loss},
      {"final_val_accuracy", &RunMetrics::final_val_accuracy},
      {"best_val_accuracy", &RunMetrics::best_val_accuracy},
      {"bytes_sent", &RunMetrics::bytes_sent},
      {"sim_time_s", &RunMetrics::sim_time_s},
      {"compute_utilization", &RunMetrics::compute_utilization},
      {"time_to_target_s", &RunMetrics::time_to_target_s},
      {"wall_time_s", &RunMetrics::wall_time_s},
  };
  return columns;
}

RunMetrics read_run_metrics(const std::string& run_dir) {
  RunMetrics m;
  const std::string text = read_file(run_dir + "/metrics.jsonl");
  std::istringstream metrics(text);
  std::string line;
  for (int64_t line_no = 1; std::getline(metrics, line); ++line_no) {
    if (metrics.eof() && !line.empty()) {  // no newline after it: the writer was cut off
      m.torn = "metrics.jsonl: line " + std::to_string(line_no) + " is torn (" + std::to_string(line.size()) +
               " bytes without a newline, the run's writes were cut off); ignored";
      break;
    }
    if (core::json_find_string(line, "event") != "eval") continue;
    EvalPoint p;
    p.step = static_cast<int64_t>(number(line, "step"));
    p.val_loss = number(line, "val_loss");
    p.val_accuracy = number(line, "val_accuracy");
    p.bytes_sent = number(line, "bytes_sent_total");
    p.sim_time_s = number(line, "sim_time_s");
    m.evals.push_back(p);
    // fmin/fmax skip NaN: the best of the evaluations that have a value.
    m.best_val_loss = std::fmin(m.best_val_loss, p.val_loss);
    m.best_val_accuracy = std::fmax(m.best_val_accuracy, p.val_accuracy);
  }
  const std::string summary = read_file(run_dir + "/summary.json");
  if (summary.empty()) return m;
  m.has_summary = true;
  m.config_hash = core::json_find_string(summary, "config_hash").value_or("");
  if (core::json_find_string(summary, "status") == "failed")
    m.failed = core::json_find_string(summary, "error").value_or("summary.json says the run failed");
  m.steps = static_cast<int64_t>(core::json_find_number(summary, "steps").value_or(-1));
  m.final_val_loss = number(summary, "final_val_loss");
  m.last_eval_step = static_cast<int64_t>(core::json_find_number(summary, "last_eval_step").value_or(-1));
  if (summary.find("\"diverged\":true") != std::string::npos)
    m.diverged_step = static_cast<int64_t>(core::json_find_number(summary, "diverged_step").value_or(0));
  if (auto best = core::json_find_number(summary, "best_val_loss")) m.best_val_loss = *best;
  m.final_val_accuracy = number(summary, "final_val_accuracy");
  m.bytes_sent = number(summary, "bytes_sent_total");
  m.sim_time_s = number(summary, "sim_time_s");
  m.compute_utilization = number(summary, "compute_utilization");
  m.time_to_target_s = number(summary, "time_to_target_s");
  m.wall_time_s = number(summary, "wall_time_s");
  return m;
}

std::string summary_status(const RunMetrics& m, std::string* reason) {
  if (!m.failed.empty()) {
    *reason = m.failed;
    return "failed";
  }
  if (m.diverged_step >= 0) {
    *reason = "training loss is not finite at step " + std::to_string(m.diverged_step);
    return "diverged";
  }
  if (std::isfinite(m.final_val_loss)) return "ok";
  if (m.last_eval_step >= 0 && m.last_eval_step != m.steps) {
    // summary.json's final_val_loss is null when no eval was at the run's last step.
    *reason = "no evaluation at the final step (the last was at step " + std::to_string(m.last_eval_step) + ")";
    return "incomplete";
  }
  *reason = "final validation loss is not finite";
  return "diverged";
}

std::vector<RunResult> collect_results(const SweepPlan& plan) {
  std::vector<RunResult> results;
  for (const auto& run : plan.runs) {
    RunResult r{run, "not run", "", read_run_metrics(plan.run_dir(run))};
    const std::string outcome = read_file(plan.dir + "/logs/" + run.id + ".json");
    if (r.metrics.has_summary && r.metrics.config_hash == run.hash) {
      r.status = summary_status(r.metrics, &r.reason);
    } else if (r.metrics.has_summary) {
      r.metrics = RunMetrics{};
      r.reason = "its run directory holds results of another config";
    } else if (core::json_find_string(outcome, "config_hash") == run.hash) {
      r.status = core::json_find_string(outcome, "status").value_or("failed");
      r.reason = core::json_find_string(outcome, "reason").value_or("");
    } else if (fs::exists(plan.run_dir(run) + "/metrics.jsonl")) {
      r.status = "incomplete";
      r.reason = "started but not finished (sweep killed?)";
    }
    if (!r.metrics.torn.empty()) r.reason += (r.reason.empty() ? "" : "; ") + r.metrics.torn;
    results.push_back(std::move(r));
  }
  return results;
}

void write_tables(const SweepPlan& plan, const std::vector<RunResult>& results) {
  const auto& metrics = metric_columns();

  std::vector<std::string> header = {"run", "group", "seed", "status"};
  header.insert(header.end(), plan.keys.begin(), plan.keys.end());
  header.push_back("steps");
  for (const auto& c : metrics) header.push_back(c.name);
  header.push_back("config_hash");
  header.push_back("reason");
  std::string summary = csv_line(header);
  for (const auto& r : results) {
    std::vector<std::string> row = {r.run.id, r.run.group, std::to_string(r.run.seed), r.status};
    row.insert(row.end(), r.run.values.begin(), r.run.values.end());
    row.push_back(r.metrics.steps >= 0 ? std::to_string(r.metrics.steps) : "");
    for (const auto& c : metrics) row.push_back(cell(r.metrics.*c.field));
    row.push_back(r.run.hash);
    row.push_back(r.reason);
    summary += csv_line(row);
  }
  core::write_file_atomic(plan.dir + "/summary.csv", summary);

  // Mean and sample standard deviation over the seeds of each group that ended ok.
  header = {"group"};
  header.insert(header.end(), plan.keys.begin(), plan.keys.end());
  header.push_back("runs");
  header.push_back("ok");
  for (const auto& c : metrics) {
    header.push_back(std::string(c.name) + "_mean");
    header.push_back(std::string(c.name) + "_std");
  }
  std::string aggregate = csv_line(header);
  std::vector<std::string> groups;
  for (const auto& r : results)
    if (std::find(groups.begin(), groups.end(), r.run.group) == groups.end()) groups.push_back(r.run.group);
  for (const auto& g : groups) {
    std::vector<const RunResult*> members;
    for (const auto& r : results)
      if (r.run.group == g) members.push_back(&r);
    std::vector<std::string> row = {g};
    row.insert(row.end(), members[0]->run.values.begin(), members[0]->run.values.end());
    const auto ok = std::count_if(members.begin(), members.end(), [](const RunResult* r) { return r->status == "ok"; });
    row.push_back(std::to_string(members.size()));
    row.push_back(std::to_string(ok));
    for (const auto& c : metrics) {
      std::vector<double> xs;
      for (const auto* r : members)
        if (r->status == "ok" && std::isfinite(r->metrics.*c.field)) xs.push_back(r->metrics.*c.field);
      double mean = kUnknown, sd = kUnknown;
      if (!xs.empty()) {
        mean = 0;
        for (double x : xs) mean += x;
        mean /= static_cast<double>(xs.size());
      }
      if (xs.size() > 1) {
        double ss = 0;
        for (double x : xs) ss += (x - mean) * (x - mean);
        sd = std::sqrt(ss / static_cast<double>(xs.size() - 1));
      }
      row.push_back(cell(mean));
      row.push_back(cell(sd));
    }
    aggregate += csv_line(row);
  }
  core::write_file_atomic(plan.dir + "/aggregate.csv", aggregate);

  std::string curves = csv_line({"run", "group", "seed", "status", "step", "val_loss", "val_accuracy",
                                 "bytes_sent", "sim_time_s"});
  for (const auto& r : results) {
    for (const auto& p : r.metrics.evals) {
      curves += csv_line({r.run.id, r.run.group, std::to_string(r.run.seed), r.status, std::to_string(p.step),
                          cell(p.val_loss), cell(p.val_accuracy), cell(p.bytes_sent), cell(p.sim_time_s)});
    }
  }
  core::write_file_atomic(plan.dir + "/curves.csv", curves);
}

}  // namespace atl::sweep
