// Sweep file -> SweepSpec. Part of atoll_config because it reads YAML and checks keys
// against the config schema; the base config itself is parsed by parse_config (config.cpp).
#include "src/config/sweep_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "src/base/status.h"
#include "src/config/schema.h"
#include "src/config/yaml_place.h"

namespace atl::config {
namespace {

constexpr const char* kSweep = "sweep";

using yaml_place::at;
using yaml_place::fail;

// Every key a sweep may vary: "section.key" and "compression".
std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const auto& s : schema::sections())
    for (const auto& f : s.fields) keys.push_back(s.name + "." + f.name);
  keys.push_back("compression");
  return keys;
}

// The problem with `key` as a swept or set key, or "".
std::string key_problem(const std::string& key) {
  if (key == "run.seed") return "the seed is swept with 'seeds:', not as a key";
  if (key == "run.name" || key == "run.out_dir")
    return "the sweep places its runs in sweeps/<name>/runs/<run>; it cannot be varied";
  const auto keys = config_keys();
  if (std::find(keys.begin(), keys.end(), key) != keys.end()) return "";
  auto near = schema::closest(key, keys);
  return "unknown config key" + (near ? " (did you mean '" + *near + "'?)" : std::string(""));
}

// Flow text of a value, keeping quotes on a quoted scalar ("5" stays a string).
std::string flow_text(const YAML::Node& n) {
  YAML::Emitter out;
  if (n.IsScalar() && n.Tag() == "!") out << YAML::DoubleQuoted << n.Scalar();
  else out << YAML::Flow << n;
  return out.c_str();
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// A compression pipeline by its stages: [] -> "fp32", [{topk: 0.01}, {quantize: int8}] ->
// "topk0.01+int8", [{quantize: int4, block: 64}] -> "int4-block64".
std::string compression_label(const YAML::Node& n) {
  if (!n.IsSequence()) return flow_text(n);
  if (n.size() == 0) return "fp32";
  std::vector<std::string> stages;
  for (const auto& stage : n) {
    if (!stage.IsMap()) return flow_text(n);
    std::string op, params;
    for (auto it = stage.begin(); it != stage.end(); ++it) {
      const std::string k = it->first.Scalar(), v = it->second.IsScalar() ? it->second.Scalar() : "";
      if (k == "quantize") op = v;
      else if (k == "topk" || k == "randk" || k == "dct" || k == "zstd") op = k + v;
      else params += "-" + k + v;
    }
    stages.push_back(op + params);
  }
  return join(stages, "+");
}

// Short name of a value: the scalar itself, or a compact form of a list or mapping.
std::string value_label(const std::string& key, const YAML::Node& n) {
  if (key == "compression") return compression_label(n);
  if (n.IsScalar()) return n.Scalar();
  std::string text = flow_text(n);
  std::string out;
  for (char c : text) {
    if (c == '[' || c == ']' || c == '{' || c == '}' || c == ' ' || c == '"') continue;
    out += c == ',' ? '+' : c == ':' ? '-' : c;
  }
  return out.empty() ? "none" : out;
}

class SpecParser {
 public:
  SpecParser(const std::string& text, const std::string& source) : source_(source) {
    try {
      root_ = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      fail(at(source, e.mark), "", "YAML syntax error: " + e.msg);
    }
    spec_.source = source;
    spec_.name = std::filesystem::path(source).stem().string();
    spec_.base_yaml = text;
  }

  SweepSpec parse() {
    if (!root_.IsMap() || root_.Style() == YAML::EmitterStyle::Flow)
      fail(source_, "", "a sweep file is a block mapping of config sections plus 'sweep:'");
    YAML::Node sweep;
    int first = -1, end = -1;  // 0-based lines of the sweep section: [first, end)
    for (auto it = root_.begin(); it != root_.end(); ++it) {
      const int line = it->first.Mark().line;
      if (first >= 0 && end < 0) end = line;
      if (it->first.Scalar() == kSweep) {
        sweep = it->second;
        first = line;
      }
    }
    if (first < 0) fail(source_, "", "no 'sweep:' section (see docs/sweeps.md)");
    blank_lines(first, end);
    const std::string where = at(source_, sweep.Mark());
    if (!sweep.IsMap()) fail(where, kSweep, "expected a mapping with grid, zip, seeds, per_algorithm");
    YAML::Node per_algorithm;
    std::string per_algorithm_where;  // "" when there is no per_algorithm section
    for (auto it = sweep.begin(); it != sweep.end(); ++it) {
      const std::string k = it->first.Scalar();
      const std::string w = at(source_, it->first.Mark());
      const YAML::Node v = it->second;
      if (k == "name") {
        parse_name(v, w);
      } else if (k == "seeds") {
        parse_seeds(v, w);
      } else if (k == "grid") {
        parse_grid(v, "sweep.grid", spec_.common);
      } else if (k == "zip") {
        parse_zip(v, "sweep.zip", spec_.common);
      } else if (k == "per_algorithm") {
        per_algorithm = v;
        per_algorithm_where = w;
      } else if (k == "smoke") {
        parse_smoke(v, "sweep.smoke", spec_.common);
      } else {
        unknown(k, w, "sweep", {"name", "seeds", "grid", "zip", "per_algorithm", "smoke"});
      }
    }
    // Last, so that its keys are checked against every common one.
    if (!per_algorithm_where.empty()) parse_per_algorithm(per_algorithm, per_algorithm_where);
    return std::move(spec_);
  }

 private:
  [[noreturn]] void unknown(const std::string& key, const std::string& where, const std::string& in,
                            const std::vector<std::string>& valid) {
    auto near = schema::closest(key, valid);
    fail(where, in + "." + key, "unknown key" +
                                    (near ? " (did you mean '" + in + "." + *near + "'?)"
                                          : " (valid: " + join(valid, ", ") + ")"));
  }

  // Blanks lines [first, end) (end < 0: to the end) of base_yaml, keeping the line count.
  void blank_lines(int first, int end) {
    std::istringstream in(spec_.base_yaml);
    std::string line, out;
    for (int i = 0; std::getline(in, line); ++i) {
      if (i >= first && (end < 0 || i < end)) line.clear();
      out += line + "\n";
    }
    spec_.base_yaml = out;
  }

  void parse_name(const YAML::Node& v, const std::string& where) {
    const std::string name = v.IsScalar() ? v.Scalar() : "";
    const bool plain = !name.empty() && name != "." && name != ".." &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                       });
    if (!plain) fail(where, "sweep.name", "expected a directory name of letters, digits, '-', '_', '.'");
    spec_.name = name;
  }

  void parse_seeds(const YAML::Node& v, const std::string& where) {
    if (!v.IsSequence() || v.size() == 0)
      fail(where, "sweep.seeds", "expected a non-empty list of integers, e.g. [1, 2, 3]");
    for (const auto& s : v) {
      auto seed = s.IsScalar() && s.Tag() != "!" ? schema::parse_uint(s.Scalar()) : std::nullopt;
      if (!seed)
        fail(at(source_, s.Mark()), "sweep.seeds", "expected a non-negative integer, got '" + flow_text(s) + "'");
      if (std::find(spec_.seeds.begin(), spec_.seeds.end(), *seed) != spec_.seeds.end())
        fail(at(source_, s.Mark()), "sweep.seeds", "seed " + s.Scalar() + " is listed twice");
      spec_.seeds.push_back(*seed);
    }
  }

  // Checks that `key` may be varied or set in `block` (`path` names the place in the sweep).
  void claim(const std::string& key, const std::string& path, const std::string& where,
             std::set<std::string>& used) {
    if (auto problem = key_problem(key); !problem.empty()) fail(where, path + "." + key, problem);
    if (!used.insert(key).second) fail(where, path + "." + key, "is varied or set twice in the sweep");
  }

  std::vector<SweepValue> values_of(const std::string& key, const YAML::Node& list,
                                    const std::string& path, const std::string& where) {
    if (!list.IsSequence() || list.size() == 0)
      fail(where, path + "." + key, "expected a non-empty list of values, e.g. [10, 50, 200]");
    std::vector<SweepValue> values;
    for (const auto& v : list) values.push_back({flow_text(v), value_label(key, v)});
    return values;
  }

  std::set<std::string>& used_by(const SweepBlock& block) { return used_[&block]; }

  void parse_grid(const YAML::Node& grid, const std::string& path, SweepBlock& block) {
    if (!grid.IsMap()) fail(at(source_, grid.Mark()), path, "expected a mapping of key: [values]");
    for (auto it = grid.begin(); it != grid.end(); ++it) {
      const std::string key = it->first.Scalar(), where = at(source_, it->first.Mark());
      claim(key, path, where, used_by(block));
      SweepAxis axis{{key}, {}, where};
      for (auto& v : values_of(key, it->second, path, where)) axis.points.push_back({v});
      block.axes.push_back(std::move(axis));
    }
  }

  void parse_zip(const YAML::Node& zip, const std::string& path, SweepBlock& block) {
    if (zip.IsSequence()) {
      for (size_t i = 0; i < zip.size(); ++i) parse_zip(zip[i], path + "[" + std::to_string(i) + "]", block);
      return;
    }
    if (!zip.IsMap() || zip.size() == 0)
      fail(at(source_, zip.Mark()), path, "expected a mapping of key: [values] (lists of equal length)");
    SweepAxis axis;
    axis.where = at(source_, zip.Mark());
    for (auto it = zip.begin(); it != zip.end(); ++it) {
      const std::string key = it->first.Scalar(), where = at(source_, it->first.Mark());
      claim(key, path, where, used_by(block));
      auto values = values_of(key, it->second, path, where);
      if (!axis.points.empty() && values.size() != axis.points.size())
        fail(where, path + "." + key, "has " + std::to_string(values.size()) + " values but '" +
                                          axis.keys[0] + "' has " + std::to_string(axis.points.size()) +
                                          " (zip varies its keys together: lists of equal length)");
      if (axis.points.empty()) axis.points.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) axis.points[i].push_back(values[i]);
      axis.keys.push_back(key);
    }
    block.axes.push_back(std::move(axis));
  }

  void parse_per_algorithm(const YAML::Node& v, const std::string& where) {
    if (!v.IsMap()) fail(where, "sweep.per_algorithm", "expected a mapping of algorithm name: {set, grid, zip}");
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string algo = it->first.Scalar(), w = at(source_, it->first.Mark());
      const std::string path = "sweep.per_algorithm." + algo;
      const YAML::Node body = it->second;
      if (!body.IsMap()) fail(w, path, "expected a mapping with set, grid or zip");
      if (spec_.per_algorithm.count(algo)) fail(w, path, "is listed twice");
      SweepBlock& block = spec_.per_algorithm[algo];
      spec_.where["per_algorithm." + algo] = w;
      used_by(block) = used_by(spec_.common);  // common keys may not be repeated here
      used_by(block).insert("algorithm.name");
      for (auto b = body.begin(); b != body.end(); ++b) {
        const std::string k = b->first.Scalar(), bw = at(source_, b->first.Mark());
        if (k == "grid") parse_grid(b->second, path + ".grid", block);
        else if (k == "zip") parse_zip(b->second, path + ".zip", block);
        else if (k == "set") parse_set(b->second, path + ".set", block);
        else if (k == "smoke") parse_smoke(b->second, path + ".smoke", block);
        else unknown(k, bw, path, {"set", "grid", "zip", "smoke"});
      }
    }
  }

  void parse_set(const YAML::Node& set, const std::string& path, SweepBlock& block) {
    if (!set.IsMap()) fail(at(source_, set.Mark()), path, "expected a mapping of key: value");
    for (auto it = set.begin(); it != set.end(); ++it) {
      const std::string key = it->first.Scalar(), where = at(source_, it->first.Mark());
      if (key == "algorithm.name") fail(where, path + "." + key, "cannot be set per algorithm");
      claim(key, path, where, used_by(block));
      block.set.emplace_back(key, SweepValue{flow_text(it->second), value_label(key, it->second)});
    }
  }

  // `smoke:` keys. Any config key the sweep may vary, each once in its mapping; unlike `set:`
  // they may repeat a varied key, since they replace it in the smoke run only.
  void parse_smoke(const YAML::Node& smoke, const std::string& path, SweepBlock& block) {
    if (!smoke.IsMap()) fail(at(source_, smoke.Mark()), path, "expected a mapping of key: value, e.g. {train.steps: 4}");
    std::set<std::string> seen;
    for (auto it = smoke.begin(); it != smoke.end(); ++it) {
      const std::string key = it->first.Scalar(), where = at(source_, it->first.Mark());
      if (auto problem = key_problem(key); !problem.empty()) fail(where, path + "." + key, problem);
      if (!seen.insert(key).second) fail(where, path + "." + key, "is listed twice");
      if (key == "algorithm.name") fail(where, path + "." + key, "a smoke run keeps its run's algorithm");
      spec_.where[path + "." + key] = where;
      block.smoke.emplace_back(key, SweepValue{flow_text(it->second), value_label(key, it->second)});
    }
  }

  std::string source_;
  YAML::Node root_;
  SweepSpec spec_;
  std::map<const SweepBlock*, std::set<std::string>> used_;  // keys each block varies or sets
};

}  // namespace

SweepSpec parse_sweep_spec(const std::string& yaml_text, const std::string& source) {
  return SpecParser(yaml_text, source).parse();
}

SweepSpec load_sweep_spec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path))
    throw UserError("cannot read sweep file '" + path + "': " +
                    (std::filesystem::is_directory(path) ? "it is a directory" : std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_sweep_spec(text.str(), path);
}

}  // namespace atl::config
