#include "src/sweep/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "src/base/status.h"
#include "src/config/config.h"
#include "src/core/progress.h"
#include "src/sweep/results.h"

namespace fs = std::filesystem;

namespace atl::sweep {
namespace {

struct Entry {
  std::string name;    // row label
  std::string dir;     // run directory
  std::string status;  // ok | diverged | failed | ... | incomplete
  std::string reason;
  RunMetrics metrics;
  std::map<std::string, std::string> config;  // "section.key" -> value text
};

// A run's config.yaml as "section.key" -> value (config::flatten_yaml), read as text so that
// a run written by another version of atoll, with other keys, still compares.
std::map<std::string, std::string> flatten_config(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return config::flatten_yaml(text.str());
}

Entry entry_for_run(const std::string& name, const std::string& dir) {
  Entry e{name, dir, "incomplete", "", read_run_metrics(dir), flatten_config(dir + "/config.yaml")};
  if (e.metrics.has_summary) e.status = summary_status(e.metrics, &e.reason);
  if (!e.metrics.torn.empty()) e.reason += (e.reason.empty() ? "" : "; ") + e.metrics.torn;
  return e;
}

std::vector<Entry> entries_for(const std::string& arg) {
  std::string dir = arg;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (fs::exists(dir + "/plan.csv")) {
    std::vector<Entry> entries;
    const SweepPlan plan = read_plan(dir);
    for (auto& r : collect_results(plan)) {
      // Never started, or its directory holds another config's results.
      if (r.status == "not run") continue;
      Entry e = entry_for_run(r.run.id, plan.run_dir(r.run));
      e.status = r.status;
      e.reason = r.reason;
      entries.push_back(std::move(e));
    }
    return entries;
  }
  if (!fs::exists(dir + "/config.yaml"))
    throw UserError("'" + arg + "' is neither a run directory (config.yaml) nor a sweep directory (plan.csv)");
  return {entry_for_run(fs::path(dir).filename().string(), dir)};
}

std::string fixed(double v, const char* format) {
  if (!std::isfinite(v)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

std::string compare_table(const std::vector<std::string>& dirs) {
  std::vector<Entry> entries;
  for (const auto& d : dirs)
    for (auto& e : entries_for(d)) entries.push_back(std::move(e));
  if (entries.empty()) return "no runs to compare\n";

  // Config keys whose values differ among the runs.
  std::set<std::string> keys;
  for (const auto& e : entries)
    for (const auto& [k, v] : e.config) keys.insert(k);
  std::vector<std::string> differing;
  for (const auto& k : keys) {
    if (k == "run.name" || k == "run.out_dir") continue;
    std::set<std::string> values;
    for (const auto& e : entries) values.insert(e.config.count(k) ? e.config.at(k) : "-");
    if (values.size() > 1) differing.push_back(k);
  }

  struct Column {
    std::string title;
    bool right;  // numbers are right-aligned
    std::vector<std::string> cells;
  };
  std::vector<Column> columns;
  columns.push_back({"run", false, {}});
  for (const auto& k : differing) columns.push_back({k, false, {}});
  columns.push_back({"status", false, {}});
  const std::vector<std::pair<std::string, std::function<std::string(const Entry&)>>> metrics = {
      {"steps", [](const Entry& e) { return e.metrics.steps >= 0 ? std::to_string(e.metrics.steps) : ""; }},
      {"final val", [](const Entry& e) { return fixed(e.metrics.final_val_loss, "%.4f"); }},
      {"best val", [](const Entry& e) { return fixed(e.metrics.best_val_loss, "%.4f"); }},
      {"accuracy", [](const Entry& e) { return fixed(e.metrics.final_val_accuracy, "%.4f"); }},
      {"sent", [](const Entry& e) {
         return std::isfinite(e.metrics.bytes_sent) ? core::human_bytes(e.metrics.bytes_sent) : "";
       }},
      {"sim time", [](const Entry& e) { return fixed(e.metrics.sim_time_s, "%.1f s"); }},
      {"compute", [](const Entry& e) { return fixed(100 * e.metrics.compute_utilization, "%.1f%%"); }},
      {"to target", [](const Entry& e) { return fixed(e.metrics.time_to_target_s, "%.1f s"); }},
      {"wall", [](const Entry& e) { return fixed(e.metrics.wall_time_s, "%.1f s"); }},
  };
  for (const auto& [title, get] : metrics) columns.push_back({title, true, {}});
  for (const auto& e : entries) {
    size_t c = 0;
    columns[c++].cells.push_back(e.name);
    for (const auto& k : differing) columns[c++].cells.push_back(e.config.count(k) ? e.config.at(k) : "-");
    columns[c++].cells.push_back(e.status);
    for (const auto& [title, get] : metrics) columns[c++].cells.push_back(get(e));
  }
  std::erase_if(columns, [](const Column& col) {
    return std::all_of(col.cells.begin(), col.cells.end(), [](const std::string& s) { return s.empty(); });
  });

  std::vector<size_t> width;
  for (const auto& col : columns) {
    size_t w = col.title.size();
    for (const auto& s : col.cells) w = std::max(w, s.size());
    width.push_back(w);
  }
  auto row = [&](auto cell_of) {
    std::string line;
    for (size_t c = 0; c < columns.size(); ++c) {
      const std::string s = cell_of(c);
      const std::string pad(width[c] - s.size(), ' ');
      line += (c ? "  " : "") + (columns[c].right ? pad + s : s + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::string out = row([&](size_t c) { return columns[c].title; });
  for (size_t i = 0; i < entries.size(); ++i) out += row([&](size_t c) { return columns[c].cells[i]; });
  for (const auto& e : entries)
    if (!e.reason.empty() && (e.status != "ok" || !e.metrics.torn.empty())) out += e.name + ": " + e.status + ": " + e.reason + "\n";
  return out;
}

}  // namespace atl::sweep
