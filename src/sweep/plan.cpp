#include "src/sweep/plan.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "src/base/status.h"
#include "src/core/json.h"
#include "src/core/run_dir.h"
#include "src/sweep/csv.h"

namespace fs = std::filesystem;

namespace atl::sweep {
namespace {

using config::SweepAxis;
using config::SweepValue;

// One key's value in a run; `swept` is false for per_algorithm `set:` keys.
struct Assignment {
  std::string key;
  SweepValue value;
  bool swept = true;
};
using Point = std::vector<Assignment>;

// The cartesian product of `axes`; the last axis varies fastest.
std::vector<Point> product(const std::vector<SweepAxis>& axes) {
  std::vector<Point> points(1);
  for (const auto& axis : axes) {
    std::vector<Point> next;
    for (const auto& p : points) {
      for (const auto& values : axis.points) {
        Point q = p;
        for (size_t k = 0; k < axis.keys.size(); ++k) q.push_back({axis.keys[k], values[k]});
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  return points;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// Safe in a directory name and a shell word: letters, digits and . _ + - stay, others -> '_'.
std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' || c == '-';
    out += ok ? c : '_';
  }
  return out.empty() ? "_" : out;
}

// The name of each key in run ids: its last part ("inner_steps"), its section for a "name"
// ("algorithm"), or the whole key when two swept keys would get the same short name.
std::map<std::string, std::string> short_names(const std::vector<std::string>& keys) {
  auto shorten = [](const std::string& key) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos) return key;
    const std::string last = key.substr(dot + 1);
    return last == "name" ? key.substr(0, dot) : last;
  };
  std::map<std::string, int> count;
  for (const auto& k : keys) ++count[shorten(k)];
  std::map<std::string, std::string> names;
  for (const auto& k : keys) names[k] = count[shorten(k)] > 1 ? k : shorten(k);
  return names;
}

// Where each varied or set key is written in the sweep file.
std::map<std::string, std::string> key_places(const config::SweepSpec& spec) {
  std::map<std::string, std::string> where;
  auto add = [&](const config::SweepBlock& b, const std::string& set_where) {
    for (const auto& axis : b.axes)
      for (const auto& k : axis.keys) where.emplace(k, axis.where);
    for (const auto& [k, v] : b.set) where.emplace(k, set_where);
  };
  add(spec.common, spec.source);
  for (const auto& [algo, block] : spec.per_algorithm) add(block, spec.where.at("per_algorithm." + algo));
  return where;
}

// Re-throws a run's config error with the sweep file's line of the key it names, when the
// error comes from one of the run's overrides ("--set KEY=...").
[[noreturn]] void rethrow_for_run(const UserError& e, const std::string& run_id,
                                  const std::map<std::string, std::string>& places) {
  std::string msg = e.what();
  // A base key that a swept algorithm does not read: the sweep's remedy is per_algorithm, not
  // the command line's section replacement that config suggests.
  if (const size_t hint = msg.find("; to replace the file's algorithm section, --set"); hint != std::string::npos)
    msg = msg.substr(0, hint) + "; set it under sweep.per_algorithm for the algorithms that read it";
  std::string where;
  if (msg.rfind("--set ", 0) == 0) {
    const std::string key = msg.substr(6, msg.find('=') - 6);
    if (auto it = places.find(key); it != places.end()) where = it->second + ": ";
  }
  throw UserError(where + "sweep run '" + run_id + "': " + msg);
}

}  // namespace

ExpandedSweep expand(const config::SweepSpec& spec, const std::string& root, const ConfigCheck& check,
                     bool smoke) {
  const config::Config base = config::parse_config(spec.base_yaml, spec.source);
  ExpandedSweep out;
  SweepPlan& plan = out.plan;
  plan.name = smoke ? spec.name + "-smoke" : spec.name;
  plan.dir = (fs::path(root) / plan.name).string();
  auto add_keys = [&](const config::SweepBlock& block) {
    for (const auto& axis : block.axes)
      for (const auto& k : axis.keys)
        if (std::find(plan.keys.begin(), plan.keys.end(), k) == plan.keys.end()) plan.keys.push_back(k);
  };
  add_keys(spec.common);
  for (const auto& [algo, block] : spec.per_algorithm) add_keys(block);
  const auto names = short_names(plan.keys);
  const auto places = key_places(spec);

  // The algorithm of each common point decides which per_algorithm block applies.
  const std::vector<Point> commons = product(spec.common.axes);
  std::vector<std::string> algos;
  for (const Point& p : commons) {
    std::string algo = base.algorithm.name;
    for (const auto& a : p)
      if (a.key == "algorithm.name") algo = a.value.label;
    algos.push_back(algo);
  }
  const std::vector<uint64_t> seeds = spec.seeds.empty() ? std::vector<uint64_t>{base.run.seed} : spec.seeds;
  std::map<std::string, std::string> run_of_config;  // hash with run.name blanked -> run id
  std::set<std::string> smoked;                      // smoke: the algorithms that have their run
  for (size_t c = 0; c < commons.size(); ++c) {
    const auto per = spec.per_algorithm.find(algos[c]);
    if (smoke && !smoked.insert(algos[c]).second) continue;
    std::vector<Point> tails =
        per == spec.per_algorithm.end() ? std::vector<Point>(1) : product(per->second.axes);
    if (smoke) tails.resize(1);
    for (const Point& tail : tails) {
      Point point = commons[c];
      point.insert(point.end(), tail.begin(), tail.end());
      if (per != spec.per_algorithm.end())
        for (const auto& [k, v] : per->second.set) point.push_back({k, v, false});
      for (uint64_t seed : seeds) {
        if (smoke && seed != seeds.front()) break;
        PlannedRun run;
        run.seed = seed;
        run.values.assign(plan.keys.size(), "");
        for (const auto& a : point) {
          if (!a.swept) continue;
          const auto key = std::find(plan.keys.begin(), plan.keys.end(), a.key);
          const size_t i = static_cast<size_t>(key - plan.keys.begin());
          run.values[i] = a.value.label;
        }
        std::vector<std::string> parts;
        for (size_t i = 0; i < plan.keys.size(); ++i)
          if (!run.values[i].empty()) parts.push_back(names.at(plan.keys[i]) + "=" + sanitize(run.values[i]));
        run.group = join(parts, ",");
        run.id = (run.group.empty() ? "" : run.group + ",") + "seed=" + std::to_string(seed);
        if (run.group.empty()) run.group = "base";

        std::vector<std::string> overrides;
        for (const auto& a : point) overrides.push_back(a.key + "=" + a.value.text);
        overrides.push_back("run.seed=" + std::to_string(seed));
        overrides.push_back("run.name=\"" + run.id + "\"");
        overrides.push_back("run.out_dir=\"" + plan.dir + "/runs\"");
        auto run_places = places;  // a smoke key's error names its line in the smoke mapping
        if (smoke) {
          for (const auto& [k, v] : spec.common.smoke) {
            overrides.push_back(k + "=" + v.text);
            run_places[k] = spec.where.at("sweep.smoke." + k);
          }
          if (per != spec.per_algorithm.end())
            for (const auto& [k, v] : per->second.smoke) {
              overrides.push_back(k + "=" + v.text);
              run_places[k] = spec.where.at("sweep.per_algorithm." + algos[c] + ".smoke." + k);
            }
        }
        config::Config cfg;
        try {
          cfg = config::parse_config(spec.base_yaml, spec.source, overrides);
          check(cfg);
        } catch (const UserError& e) {
          rethrow_for_run(e, run.id, run_places);
        }
        run.hash = core::config_hash(cfg);
        config::Config anonymous = cfg;
        anonymous.run.name.clear();
        auto [it, fresh] = run_of_config.emplace(core::config_hash(anonymous), run.id);
        if (!fresh)
          throw UserError(spec.source + ": sweep runs '" + it->second + "' and '" + run.id +
                          "' resolve to the same config (is a value listed twice?)");
        plan.runs.push_back(std::move(run));
        out.configs.push_back(std::move(cfg));
      }
    }
  }
  // After the runs: an unknown algorithm in the grid is reported as such, not as this.
  for (const auto& [algo, block] : spec.per_algorithm) {
    if (std::find(algos.begin(), algos.end(), algo) != algos.end()) continue;
    std::set<std::string> used(algos.begin(), algos.end());
    throw UserError(spec.where.at("per_algorithm." + algo) + ": key 'sweep.per_algorithm." + algo +
                    "': no run of the sweep uses algorithm '" + algo + "' (runs use: " +
                    join({used.begin(), used.end()}, ", ") + ")");
  }
  return out;
}

bool run_finished(const SweepPlan& plan, const PlannedRun& run) {
  std::ifstream in(plan.run_dir(run) + "/summary.json");
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  // A summary that says the run failed (the coordinator's failed start, say) is no result.
  return core::json_find_string(text.str(), "config_hash") == run.hash &&
         core::json_find_string(text.str(), "status") != "failed";
}

std::string plan_text(const SweepPlan& plan) {
  std::set<std::string> groups;
  size_t done = 0;
  std::string lines;
  for (const auto& r : plan.runs) {
    groups.insert(r.group);
    const bool finished = run_finished(plan, r);
    done += finished;
    lines += std::string(finished ? "  done  " : "  todo  ") + r.id + "\n";
  }
  const size_t seeds = groups.empty() ? 0 : plan.runs.size() / groups.size();
  std::ostringstream head;
  head << "sweep " << plan.name << ": " << plan.runs.size() << " runs (" << groups.size()
       << " configurations x " << seeds << " seeds), " << done << " already done -> " << plan.dir << "\n";
  head << "swept: " << (plan.keys.empty() ? "(seeds only)" : join(plan.keys, ", ")) << "\n";
  return head.str() + lines;
}

void write_plan(const SweepPlan& plan) {
  std::vector<std::string> header = {"run", "group", "seed", "config_hash"};
  header.insert(header.end(), plan.keys.begin(), plan.keys.end());
  std::string text = csv_line(header);
  for (const auto& r : plan.runs) {
    std::vector<std::string> row = {r.id, r.group, std::to_string(r.seed), r.hash};
    row.insert(row.end(), r.values.begin(), r.values.end());
    text += csv_line(row);
  }
  fs::create_directories(plan.dir);
  core::write_file_atomic(plan.dir + "/plan.csv", text);
}

SweepPlan read_plan(const std::string& dir) {
  const std::string path = dir + "/plan.csv";
  std::ifstream in(path);
  if (!in) throw UserError("'" + dir + "' is not a sweep directory (no plan.csv; `atoll sweep` writes one)");
  std::stringstream text;
  text << in.rdbuf();
  const auto rows = parse_csv(text.str());
  const std::vector<std::string> fixed = {"run", "group", "seed", "config_hash"};
  if (rows.empty() || rows[0].size() < fixed.size() || !std::equal(fixed.begin(), fixed.end(), rows[0].begin()))
    throw UserError(path + ": not a plan written by atoll sweep (expected columns run,group,seed,config_hash,...)");
  SweepPlan plan;
  plan.dir = dir;
  plan.name = fs::path(dir).lexically_normal().filename().string();
  if (plan.name.empty()) plan.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  plan.keys.assign(rows[0].begin() + 4, rows[0].end());
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& row = rows[i];
    if (row.size() != rows[0].size())
      throw UserError(path + ":" + std::to_string(i + 1) + ": expected " + std::to_string(rows[0].size()) + " columns");
    PlannedRun r;
    r.id = row[0];
    r.group = row[1];
    const auto [end, ec] = std::from_chars(row[2].data(), row[2].data() + row[2].size(), r.seed);
    if (ec != std::errc() || end != row[2].data() + row[2].size() || r.id.empty())
      throw UserError(path + ":" + std::to_string(i + 1) + ": expected a run id and a seed");
    r.hash = row[3];
    r.values.assign(row.begin() + 4, row.end());
    plan.runs.push_back(std::move(r));
  }
  return plan;
}

}  // namespace atl::sweep
