// YAML -> Config. With sweep_spec.cpp (sweep files), the only code that touches yaml-cpp.
// Every key is looked up in the schema table (schema.cpp), converted strictly (no silent
// truncation of 1.5 to 1, no "010" read as octal), range-checked at once and its location
// remembered in Config::origins, so that every message can point at FILE:LINE or at the
// --set that caused it.
//
// Length: just over 800 lines. The compression list and the algorithm section's deferred keys
// are parsed with the strict scalar converters and key checks defined here (to_integer, plain,
// describe, key_name, check_unique); moving either out would put those helpers in a header
// for this one reader.
#include "src/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "algorithms/options.h"
#include "compression/stage.h"
#include "src/base/status.h"
#include "src/config/cross_field.h"
#include "src/config/schema.h"
#include "src/config/yaml_place.h"
#include "src/data/kinds.h"

namespace atl::config {
namespace {

using schema::Field;
using schema::FieldRef;
using schema::Section;

template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

using yaml_place::at;
using yaml_place::fail;

// Where `key` was set, falling back to the config's source name.
std::string origin_of(const Config& c, const std::string& key) {
  auto it = c.origins.find(key);
  return it != c.origins.end() ? it->second : c.source;
}

// `compression` is a list of stages, not a mapping of keys, so it is parsed on its own.
constexpr const char* kCompression = "compression";

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const auto& s : schema::sections()) names.push_back(s.name);
  names.push_back(kCompression);
  return names;
}

std::vector<std::string> full_keys() {
  std::vector<std::string> keys;
  for (const auto& s : schema::sections())
    for (const auto& f : s.fields) keys.push_back(s.name + "." + f.name);
  return keys;
}

std::string did_you_mean(const std::string& suggestion) {
  return " (did you mean '" + suggestion + "'?)";
}

// Suggestion for an unknown key `word`: the closest key of `section` when there is one
// (or the closest section name when `section` is null), else the same key in another
// section ("model.lr" -> "train.lr"). "" when nothing is close.
std::string suggest(const Section* section, const std::string& word) {
  if (section) {
    std::vector<std::string> names;
    for (const auto& f : section->fields) names.push_back(f.name);
    if (auto near = schema::closest(word, names)) return did_you_mean(section->name + "." + *near);
  } else if (auto near = schema::closest(word, section_names())) {
    return did_you_mean(*near);
  }
  for (const auto& s : schema::sections())
    if (&s != section && schema::find_field(s, word)) return did_you_mean(s.name + "." + word);
  return "";
}

// How a node looks, for "expected X, got Y".
std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar:
      return (n.Tag() == "!" ? "the quoted string '" : "'") + n.Scalar() + "'";
    default: return "an undefined value";
  }
}

// The text of an unquoted scalar; nullopt for quoted strings ("5" is a string in YAML),
// lists, mappings and nothing.
std::optional<std::string> plain(const YAML::Node& n) {
  if (!n.IsScalar() || n.Tag() == "!") return std::nullopt;
  return n.Scalar();
}

// The problem with `n` as an integer in [lo, hi] checked by `check`, or "" and sets `out`.
std::string to_integer(const YAML::Node& n, int64_t lo, int64_t hi, const schema::Check& check,
                       int64_t& out) {
  auto text = plain(n);
  auto v = text ? schema::parse_int(*text) : std::nullopt;
  if (!v) return "expected an integer, got " + describe(n);
  if (*v < lo || *v > hi) return "value " + *text + " does not fit in a 32-bit integer";
  if (auto problem = check.check_number(static_cast<double>(*v)); !problem.empty()) return problem;
  out = *v;
  return "";
}

template <typename R>
std::string assign_records(const YAML::Node& value, const std::string& name,
                           const std::vector<schema::RecordField<R>>& table, const char* example,
                           std::vector<R>& out);

// Converts `value` into the field behind `ref` (or returns the problem, leaving it unchanged).
// `name` prefixes problems inside lists ("speeds[2]: ...").
std::string assign_ref(FieldRef ref, const schema::Check& check, const std::string& name,
                       const YAML::Node& value) {
  auto list = [&](auto element, const char* what, auto& out) -> std::string {
    if (!value.IsSequence()) return std::string("expected a list of ") + what + ", got " + describe(value);
    std::remove_reference_t<decltype(out)> v;
    for (size_t i = 0; i < value.size(); ++i) {
      typename std::remove_reference_t<decltype(out)>::value_type x{};
      auto problem = element(value[i], x);
      if (!problem.empty()) return name + "[" + std::to_string(i) + "]: " + problem;
      v.push_back(std::move(x));
    }
    out = std::move(v);
    return "";
  };
  auto to_double = [&](const YAML::Node& n, double& out) -> std::string {
    auto text = plain(n);
    auto v = text ? schema::parse_double(*text) : std::nullopt;
    if (!v) return "expected a number, got " + describe(n);
    if (!std::isfinite(*v)) return "must be a finite number (got " + *text + ")";
    if (auto problem = check.check_number(*v); !problem.empty()) return problem;
    out = *v;
    return "";
  };
  auto to_string = [&](const YAML::Node& n, std::string& out) -> std::string {
    // Any scalar is a string ("name: 42" names the run "42"); nothing is "".
    if (!n.IsScalar() && !n.IsNull()) return "expected a string, got " + describe(n);
    std::string v = n.IsNull() ? "" : n.Scalar();
    if (auto problem = check.check_name(v); !problem.empty()) return problem;
    out = std::move(v);
    return "";
  };
  return std::visit(
      Overloaded{
          [&](int* p) -> std::string {
            int64_t v = 0;
            auto problem = to_integer(value, INT_MIN, INT_MAX, check, v);
            if (problem.empty()) *p = static_cast<int>(v);
            return problem;
          },
          [&](int64_t* p) { return to_integer(value, INT64_MIN, INT64_MAX, check, *p); },
          [&](uint64_t* p) -> std::string {
            auto text = plain(value);
            auto v = text ? schema::parse_uint(*text) : std::nullopt;
            if (!v) return "expected a non-negative integer, got " + describe(value);
            *p = *v;
            return "";
          },
          [&](double* p) { return to_double(value, *p); },
          [&](bool* p) -> std::string {
            bool v = false;
            if (!plain(value) || !YAML::convert<bool>::decode(value, v))
              return "expected true or false, got " + describe(value);
            *p = v;
            return "";
          },
          [&](std::string* p) { return to_string(value, *p); },
          [&](const schema::ChoiceRef& p) -> std::string {
            std::string name;
            auto problem = to_string(value, name);  // checks it is one of the names
            if (problem.empty()) p.set(name);
            return problem;
          },
          [&](std::vector<int>* p) {
            return list(
                [&](const YAML::Node& n, int& x) {
                  int64_t v = 0;
                  auto problem = to_integer(n, INT_MIN, INT_MAX, check, v);
                  x = static_cast<int>(v);
                  return problem;
                },
                "integers", *p);
          },
          [&](std::vector<double>* p) { return list(to_double, "numbers", *p); },
          [&](std::vector<std::string>* p) { return list(to_string, "strings", *p); },
          [&](std::vector<IslandEvent>* p) {
            return assign_records(value, name, schema::event_fields(),
                                  "{kill: 1, at_step: 100}", *p);
          },
          [&](std::vector<NetworkLink>* p) {
            return assign_records(value, name, schema::link_fields(),
                                  "{between: [us, eu], latency_ms: 40}", *p);
          },
          [&](PerIsland* p) -> std::string {
            PerIsland v;
            auto element = [&](const YAML::Node& n, int& x) {
              int64_t i = 0;
              auto problem = to_integer(n, INT_MIN, INT_MAX, check, i);
              x = static_cast<int>(i);
              return problem;
            };
            if (value.IsSequence() && value.size() == 0) return "expected an integer or a list of them, got []";
            if (value.IsSequence()) return list(element, "integers", p->values);
            auto problem = element(value, v.values.front());
            if (problem.empty()) *p = v;
            return problem;
          },
          [&](std::vector<ModuleLevel>* p) {
            return assign_records(value, name, schema::level_fields(), "{blocks: [0, 1], modules: 2}", *p);
          },
      },
      ref);
}

// A list of records such as [{kill: 1, at_step: 100}, {rejoin: 1, at_time_s: 30}].
template <typename R>
std::string assign_records(const YAML::Node& value, const std::string& name,
                           const std::vector<schema::RecordField<R>>& table, const char* example,
                           std::vector<R>& out) {
  if (value.IsNull()) {
    out.clear();
    return "";
  }
  if (!value.IsSequence())
    return std::string("expected a list of entries such as ") + example + ", got " + describe(value);
  std::vector<R> records;
  std::vector<std::string> names;
  for (const auto& f : table) names.push_back(f.name);
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string item = name + "[" + std::to_string(i) + "]";
    const YAML::Node node = value[i];
    if (!node.IsMap()) return item + ": expected an entry such as " + example + ", got " + describe(node);
    R r;
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : "?";
      const schema::RecordField<R>* field = nullptr;
      for (const auto& f : table)
        if (f.name == k) field = &f;
      if (!field) {
        auto near = schema::closest(k, names);
        return item + ": unknown key '" + k + "'" +
               (near ? did_you_mean(*near) : " (valid: " + schema::join(names) + ")");
      }
      if (!seen.insert(k).second) return item + ": duplicate key '" + k + "'";
      auto problem = assign_ref(field->ref(r), field->check, item + "." + k, it->second);
      if (!problem.empty()) return item + "." + k + ": " + problem;
    }
    records.push_back(std::move(r));
  }
  out = std::move(records);
  return "";
}

std::string assign(Config& cfg, const Field& field, const YAML::Node& value) {
  return assign_ref(field.ref(cfg), field.check, field.name, value);
}

void set(Config& cfg, const Section& section, const Field& field, const YAML::Node& value,
         const std::string& where) {
  const std::string key = section.name + "." + field.name;
  if (auto problem = assign(cfg, field, value); !problem.empty()) fail(where, key, problem);
  cfg.origins[key] = where;
}

// A node's name as a mapping key; section and field names must be plain words.
std::string key_name(const YAML::Node& k, const std::string& where) {
  if (!k.IsScalar()) fail(where, "", "expected a key name, got " + describe(k));
  return k.Scalar();
}

// Rejects a key seen twice in one mapping (yaml-cpp keeps both; the last would win silently).
void check_unique(std::map<std::string, std::string>& seen, const std::string& key,
                  const std::string& where, const char* what) {
  auto [it, fresh] = seen.emplace(key, where);
  if (!fresh) fail(where, key, std::string("duplicate ") + what + " (first at " + it->second + ")");
}

// ---- algorithm: its keys other than `name` wait until the name is final --------------------

// A default config whose algorithm is the first (in algorithms::AlgorithmParams order) that has
// `key`: where the every-key text takes the value of a key the chosen algorithm lacks.
Config* first_with_key(const std::string& key) {
  static std::map<std::string, Config> by_key = [] {
    std::map<std::string, Config> m;
    for (const std::string& name : algorithms::params_names()) {
      Config d;
      d.algorithm.name = name;
      d.algorithm.params = *algorithms::default_params(name);
      for (const std::string& k : algorithms::params_keys(d.algorithm.params)) m.emplace(k, d);
    }
    return m;
  }();
  return &by_key.at(key);
}

// The `algorithm:` keys set by the text and the overrides, in the order they were last set.
// They are applied to the chosen algorithm's own options once every override has run
// (apply_algorithm_keys), so that neither the order of the keys nor `--set algorithm.name`
// after the file's keys matters.
struct AlgorithmSets {
  struct Entry {
    std::string key;     // without "algorithm."
    YAML::Node value;
    std::string where;
  };
  // A list: a YAML::Node's assignment writes through to the node it refers to, so entries
  // are never assigned (a vector's erase would move-assign them).
  std::list<Entry> entries;

  void add(const std::string& key, const YAML::Node& value, const std::string& where) {
    entries.remove_if([&](const Entry& e) { return e.key == key; });
    entries.push_back({key, value, where});
  }
};

bool is_algorithm_key(const Section& section, const Field& field) {
  return section.name == "algorithm" && field.name != "name";
}

// Sets `field` of `section`, or for a key of the algorithm's options, checks the value (by
// the key's one rule, at once, so that a bad value is named where it is) and records it in
// `sets`.
void set_or_defer(Config& cfg, const Section& section, const Field& field, const YAML::Node& value,
                  const std::string& where, AlgorithmSets& sets) {
  if (!is_algorithm_key(section, field)) return set(cfg, section, field, value, where);
  Config scratch = *first_with_key(field.name);
  if (auto problem = assign(scratch, field, value); !problem.empty()) fail(where, "algorithm." + field.name, problem);
  sets.add(field.name, value, where);
}

// The chosen algorithm's options: its defaults, then each key set for it. A key it does not
// have is refused with its place and the keys it has. An unknown name is left to the
// registry's own check (validation names it with the valid names).
void apply_algorithm_keys(Config& cfg, const AlgorithmSets& sets) {
  std::optional<algorithms::AlgorithmParams> params = algorithms::default_params(cfg.algorithm.name);
  if (!params) return;
  cfg.algorithm.params = std::move(*params);
  const std::vector<std::string> keys = algorithms::params_keys(cfg.algorithm.params);
  const Section& section = *schema::find_section("algorithm");
  for (const auto& e : sets.entries) {
    const std::string key = "algorithm." + e.key;
    if (std::find(keys.begin(), keys.end(), e.key) == keys.end()) {
      std::vector<std::string> valid = {"name"};
      valid.insert(valid.end(), keys.begin(), keys.end());
      const auto named = cfg.origins.find("algorithm.name");
      const bool renamed =
          named != cfg.origins.end() && named->second.rfind("--set ", 0) == 0 && e.where.rfind("--set ", 0) != 0;
      fail(e.where, key,
           "is not a key of algorithm '" + cfg.algorithm.name + "' (its keys: " + schema::join(valid) + ")" +
               (renamed ? "; to replace the file's algorithm section, --set 'algorithm={name: " + cfg.algorithm.name + "}'"
                        : ""));
    }
    set(cfg, section, *schema::find_field(section, e.key), e.value, e.where);
  }
}

// ---- compression: [{quantize: int4, block: 128}, {zstd: 3}] ---------------------------------

// The stage keys of a list entry, from compression's stage registry (compression/stage.h):
// every quantizer is written {quantize: NAME}; the other stages {NAME: parameter}.
std::vector<std::string> stage_ops() {
  std::vector<std::string> ops;
  for (const auto& s : compression::kStageInfo) {
    const std::string op = s.slot == compression::Slot::kQuantize ? "quantize" : s.name;
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  }
  return ops;
}

std::vector<std::string> quantize_formats() {
  std::vector<std::string> names;
  for (const auto& s : compression::kStageInfo)
    if (s.slot == compression::Slot::kQuantize) names.emplace_back(s.name);
  return names;
}

const std::vector<std::string> kStageOps = stage_ops();
const std::vector<std::string> kQuantFormats = quantize_formats();

// The parameter families (compression::StageParams) of the stage named `op` in a list entry
// (not "quantize", whose formats all take block and rounding).
uint8_t stage_params_named(const std::string& op) {
  for (const auto& s : compression::kStageInfo)
    if (op == s.name) return s.params;
  return compression::kNoParams;
}

// One stage mapping; `where` locates it, `key` is "compression[i]".
CompressionStage parse_stage(const YAML::Node& node, const std::string& source,
                             const std::string& key, const std::string& where) {
  if (!node.IsMap()) {
    fail(where, key, "expected a stage such as {quantize: int4} or {zstd: 3}, got " + describe(node));
  }
  CompressionStage st;
  // Find the operation key first, so parameter errors can name it.
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string k = key_name(it->first, at(source, it->first.Mark()));
    if (std::find(kStageOps.begin(), kStageOps.end(), k) == kStageOps.end()) continue;
    if (!st.op.empty()) {
      fail(at(source, it->first.Mark()), key, "one operation per stage, found '" + st.op + "' and '" + k + "'");
    }
    st.op = k;
  }
  if (st.op.empty()) {
    const std::string first = node.begin() != node.end() ? node.begin()->first.Scalar() : "";
    auto near = schema::closest(first, kStageOps);
    fail(where, key, "a stage needs one of " + schema::join(kStageOps) +
                         (near ? did_you_mean(*near) : ""));
  }
  const std::vector<std::string> params =
      st.op == "quantize" ? std::vector<std::string>{"block", "rounding"} : std::vector<std::string>{};
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string k = it->first.Scalar();
    const std::string kw = at(source, it->first.Mark());
    const std::string full = key + "." + k;
    const YAML::Node v = it->second;
    auto integer = [&](int64_t lo, int64_t hi, int64_t fallback) {
      if (v.IsNull()) return fallback;
      int64_t out = 0;
      auto problem = to_integer(v, lo, hi, schema::closed(static_cast<double>(lo), static_cast<double>(hi)), out);
      if (!problem.empty()) fail(kw, full, problem);
      return out;
    };
    if (k == st.op) {
      if (k == "quantize") {
        const std::string f = v.IsScalar() ? v.Scalar() : "";
        if (std::find(kQuantFormats.begin(), kQuantFormats.end(), f) == kQuantFormats.end()) {
          auto near = schema::closest(f, kQuantFormats);
          fail(kw, full, "unknown format " + describe(v) + " (valid: " + schema::join(kQuantFormats) + ")" +
                             (near ? did_you_mean(*near) : ""));
        }
        st.format = f;
      } else if (const uint8_t p = stage_params_named(k); p & compression::kKeepParams) {
        auto text = plain(v);
        auto count = text ? schema::parse_int(*text) : std::nullopt;
        auto frac = text ? schema::parse_double(*text) : std::nullopt;
        if (count && *count >= 1) {
          st.count = *count;
        } else if (frac && *frac > 0 && *frac < 1) {
          st.fraction = *frac;
        } else {
          fail(kw, full, "expected a fraction in (0, 1) or a count >= 1, got " + describe(v));
        }
      } else if (p & compression::kChunkParam) {
        st.chunk = integer(1, 1 << 20, 64);
      } else if (p & compression::kLevelParam) {
        st.level = static_cast<int>(integer(1, 19, 3));
      } else if (!v.IsNull()) {
        fail(kw, full, "takes no value (write {" + k + ": null})");
      }
    } else if (std::find(params.begin(), params.end(), k) == params.end()) {
      auto near = schema::closest(k, params);
      fail(kw, full, "unknown key for a '" + st.op + "' stage" +
                         (near ? did_you_mean(key + "." + *near) : params.empty() ? " (it takes no parameters)" : " (valid: " + schema::join(params) + ")"));
    } else if (k == "block") {
      st.block = integer(1, int64_t{1} << 24, 128);
    } else {
      const std::string r = v.IsScalar() ? v.Scalar() : "";
      if (r != "nearest" && r != "stochastic") fail(kw, full, "expected nearest or stochastic, got " + describe(v));
      st.rounding = r;
    }
  }
  return st;
}

void parse_compression(const YAML::Node& body, const std::string& source, const std::string& where,
                       Config& cfg) {
  cfg.compression.clear();
  if (body.IsNull()) return;
  if (!body.IsSequence()) fail(where, kCompression, "expected a list of stages, e.g. [{quantize: int4}, {zstd: 3}], got " + describe(body));
  for (size_t i = 0; i < body.size(); ++i) {
    const std::string key = std::string(kCompression) + "[" + std::to_string(i) + "]";
    const std::string w = at(source, body[i].Mark());
    cfg.compression.push_back(parse_stage(body[i], source, key, w));
    cfg.origins[key] = w;
  }
  cfg.origins[kCompression] = where;
}

void parse_document(const std::string& text, const std::string& source, Config& cfg, AlgorithmSets& sets) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    fail(at(source, e.mark), "", "YAML syntax error: " + e.msg);
  }
  if (docs.empty()) return;
  if (docs.size() > 1) fail(source, "", "expected one YAML document, found " +
                                            std::to_string(docs.size()));
  const YAML::Node& root = docs[0];
  if (root.IsNull()) return;  // empty file: all defaults
  if (!root.IsMap())
    fail(at(source, root.Mark()), "", "expected a mapping of sections (run, model, data, ...), got " +
                                          describe(root));
  std::map<std::string, std::string> seen;
  for (auto sit = root.begin(); sit != root.end(); ++sit) {
    std::string where = at(source, sit->first.Mark());
    const std::string name = key_name(sit->first, where);
    check_unique(seen, name, where, "section");
    if (name == kCompression) {
      parse_compression(sit->second, source, where, cfg);
      continue;
    }
    const Section* section = schema::find_section(name);
    if (!section) fail(where, name, "unknown section" + suggest(nullptr, name));
    const YAML::Node body = sit->second;  // a copy: `->second` lives in a temporary
    if (body.IsNull()) continue;  // "train:" with nothing under it
    if (!body.IsMap()) fail(where, name, "expected a mapping of keys, got " + describe(body));
    for (auto fit = body.begin(); fit != body.end(); ++fit) {
      where = at(source, fit->first.Mark());
      const std::string key = name + "." + key_name(fit->first, where);
      check_unique(seen, key, where, "key");
      const Field* field = schema::find_field(*section, fit->first.Scalar());
      if (!field) fail(where, key, "unknown key" + suggest(section, fit->first.Scalar()));
      set_or_defer(cfg, *section, *field, fit->second, where, sets);
    }
  }
}

// "algorithm={name: ddp}": the section as the mapping says, every key it leaves out at its
// default (what the file set under that section is dropped, its origins with it).
void replace_section(Config& cfg, const Section& section, const std::string& text, const std::string& where,
                     AlgorithmSets& sets) {
  YAML::Node body;
  try {
    body = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(where, section.name, "YAML syntax error in the value: " + e.msg);
  }
  if (!body.IsNull() && !body.IsMap())
    fail(where, section.name, "expected a mapping of the section's keys, e.g. {name: ddp}, got " + describe(body));
  Config defaults;
  if (section.name == "algorithm") {  // its options are the chosen algorithm's, applied later
    cfg.algorithm.name = defaults.algorithm.name;
    cfg.algorithm.params = defaults.algorithm.params;
    sets.entries.clear();
  }
  for (const Field& field : section.fields) {
    if (section.name == "algorithm") {
      cfg.origins.erase(section.name + "." + field.name);
      continue;
    }
    std::visit(Overloaded{[&](const schema::ChoiceRef& mine) { mine.set(std::get<schema::ChoiceRef>(field.ref(defaults)).get()); },
                          [&](auto* mine) { *mine = *std::get<std::remove_pointer_t<decltype(mine)>*>(field.ref(defaults)); }},
               field.ref(cfg));
    cfg.origins.erase(section.name + "." + field.name);
  }
  if (body.IsNull()) return;
  std::map<std::string, std::string> seen;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string name = key_name(it->first, where);
    const std::string key = section.name + "." + name;
    check_unique(seen, key, where, "key");
    const Field* field = schema::find_field(section, name);
    if (!field) fail(where, key, "unknown key" + suggest(&section, name));
    set_or_defer(cfg, section, *field, it->second, where, sets);
  }
}

// "train.lr=3e-4": the value is read as YAML, so lists are written [64, 64].
void apply_override(const std::string& text, Config& cfg, AlgorithmSets& sets) {
  const std::string where = "--set " + text;
  const size_t eq = text.find('=');
  if (eq == std::string::npos) fail(where, "", "expected section.key=value, e.g. train.lr=3e-4");
  std::string key = text.substr(0, eq);
  key.erase(key.find_last_not_of(' ') + 1);
  key.erase(0, key.find_first_not_of(' '));
  if (key == kCompression) {  // --set compression=[{quantize: int8}]
    YAML::Node value;
    try {
      value = YAML::Load(text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      fail(where, key, "YAML syntax error in the value: " + e.msg);
    }
    parse_compression(value, where, where, cfg);
    return;
  }
  const size_t dot = key.find('.');
  if (dot == std::string::npos) {
    if (const Section* whole = schema::find_section(key)) {
      replace_section(cfg, *whole, text.substr(eq + 1), where, sets);
      return;
    }
    fail(where, key, "expected section.key" + suggest(nullptr, key));
  }
  const std::string section_name = key.substr(0, dot), field_name = key.substr(dot + 1);
  const Section* section = schema::find_section(section_name);
  if (!section) {
    auto near = schema::closest(key, full_keys());
    fail(where, key, "unknown section '" + section_name + "'" +
                         (near ? did_you_mean(*near) : suggest(nullptr, section_name)));
  }
  const Field* field = schema::find_field(*section, field_name);
  if (!field) fail(where, key, "unknown key" + suggest(section, field_name));
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail(where, key, "YAML syntax error in the value: " + e.msg);
  }
  set_or_defer(cfg, *section, *field, value, where, sets);
}

// A data file must exist, be a file, and open for reading.
void check_readable(const Config& c, const std::string& key, const std::string& path,
                    const std::string& hint = "") {
  if (path.empty()) return;
  const std::string where = origin_of(c, key);
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) fail(where, key, "file '" + path + "' does not exist" + hint);
  if (std::filesystem::is_directory(status))
    fail(where, key, "'" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(where, key, "file '" + path + "' cannot be opened for reading");
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.source = source_name;
  AlgorithmSets sets;
  parse_document(yaml_text, source_name, cfg, sets);
  for (const auto& o : overrides) apply_override(o, cfg, sets);
  apply_algorithm_keys(cfg, sets);
  check_cross_field(cfg);
  return cfg;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UserError("cannot read config file '" + path + "': " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int err = std::ferror(f) ? errno : 0;  // e.g. EISDIR when `path` is a directory
  std::fclose(f);
  if (err) throw UserError("cannot read config file '" + path + "': " + std::strerror(err));
  return parse_config(text, path, overrides);
}

void emit(YAML::Emitter& out, FieldRef ref);

// A record as a flow mapping of the keys that differ from a default-constructed one.
template <typename R>
void emit_records(YAML::Emitter& out, std::vector<R>& records,
                  const std::vector<schema::RecordField<R>>& table) {
  if (records.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (R& r : records) {
    R def;
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& f : table) {
      const bool same = std::visit(
          Overloaded{[&](const schema::ChoiceRef& a) { return a.get() == std::get<schema::ChoiceRef>(f.ref(def)).get(); },
                     [&](auto* a) {
                       using T = std::remove_pointer_t<decltype(a)>;
                       return *a == *std::get<T*>(f.ref(def));
                     }},
          f.ref(r));
      if (same) continue;
      out << YAML::Key << f.name << YAML::Value;
      emit(out, f.ref(r));
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void emit(YAML::Emitter& out, FieldRef ref) {
  auto seq = [&](const auto& v, auto each) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& x : v) each(x);
    out << YAML::EndSeq;
  };
  std::visit(Overloaded{
                 [&](std::string* p) { out << YAML::DoubleQuoted << *p; },
                 [&](const schema::ChoiceRef& p) { out << YAML::DoubleQuoted << p.get(); },
                 [&](double* p) { out << schema::format_double(*p); },
                 [&](std::vector<int>* p) { seq(*p, [&](int x) { out << x; }); },
                 [&](std::vector<double>* p) {
                   seq(*p, [&](double x) { out << schema::format_double(x); });
                 },
                 [&](std::vector<std::string>* p) {
                   seq(*p, [&](const std::string& x) { out << YAML::DoubleQuoted << x; });
                 },
                 [&](std::vector<IslandEvent>* p) { emit_records(out, *p, schema::event_fields()); },
                 [&](std::vector<NetworkLink>* p) { emit_records(out, *p, schema::link_fields()); },
                 [&](std::vector<ModuleLevel>* p) { emit_records(out, *p, schema::level_fields()); },
                 [&](PerIsland* p) {
                   if (p->values.size() == 1) out << p->values.front();
                   else seq(p->values, [&](int x) { out << x; });
                 },
                 [&](auto* p) { out << *p; },  // integers and bool
             },
             ref);
}

std::string to_yaml(const Config& config, YamlKeys which) {
  Config c = config;  // the schema hands out mutable references; read them from a copy
  const std::vector<std::string> chosen = algorithms::params_keys(c.algorithm.params);
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const auto& section : schema::sections()) {
    out << YAML::Key << section.name << YAML::Value << YAML::BeginMap;
    if (section.name == "algorithm") {
      // name, the chosen algorithm's keys in its options' order, then for the every-key
      // text each other algorithm's key at the default of the first algorithm that has it.
      out << YAML::Key << "name" << YAML::Value;
      emit(out, schema::find_field(section, "name")->ref(c));
      for (const std::string& key : chosen) {
        out << YAML::Key << key << YAML::Value;
        emit(out, schema::find_field(section, key)->ref(c));
      }
      for (const auto& field : section.fields) {
        if (which == YamlKeys::kUsed || field.name == "name" ||
            std::find(chosen.begin(), chosen.end(), field.name) != chosen.end())
          continue;
        out << YAML::Key << field.name << YAML::Value;
        emit(out, field.ref(*first_with_key(field.name)));
      }
    } else {
      for (const auto& field : section.fields) {
        out << YAML::Key << field.name << YAML::Value;
        emit(out, field.ref(c));
      }
    }
    out << YAML::EndMap;
  }
  out << YAML::Key << kCompression << YAML::Value << YAML::BeginSeq;
  for (const auto& st : c.compression) {
    out << YAML::Flow << YAML::BeginMap;
    const uint8_t p = stage_params_named(st.op);
    if (st.op == "quantize") {
      out << YAML::Key << "quantize" << YAML::Value << st.format << YAML::Key << "block"
          << YAML::Value << st.block << YAML::Key << "rounding" << YAML::Value << st.rounding;
    } else if (p & compression::kKeepParams) {
      out << YAML::Key << st.op << YAML::Value;
      if (st.count > 0) out << st.count;
      else out << schema::format_double(st.fraction);
    } else if (p & compression::kChunkParam) {
      out << YAML::Key << st.op << YAML::Value << st.chunk;
    } else if (p & compression::kLevelParam) {
      out << YAML::Key << st.op << YAML::Value << st.level;
    } else {
      out << YAML::Key << st.op << YAML::Value << YAML::Null;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  // Only fields, not `source`: to_yaml(parse_config(to_yaml(c))) is then byte-identical.
  return std::string("# atoll config, fully resolved\n") + out.c_str() + "\n";
}

std::map<std::string, std::string> flatten_yaml(const std::string& yaml_text) {
  std::map<std::string, std::string> out;
  std::istringstream in(yaml_text);
  std::string line, section;
  auto unquote = [](std::string v) {
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return v;
  };
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos) continue;
    const std::string body = line.substr(indent);
    if (indent == 0) {
      const size_t colon = body.find(':');
      section = body.substr(0, colon);
      const std::string rest = colon == std::string::npos ? "" : body.substr(colon + 1);
      if (rest.find_first_not_of(' ') != std::string::npos) out[section] = rest.substr(rest.find_first_not_of(' '));
    } else if (body.rfind("- ", 0) == 0) {
      std::string& list = out[section];
      list += (list.empty() ? "" : ", ") + body.substr(2);
    } else {
      const size_t colon = body.find(": ");
      if (colon != std::string::npos) out[section + "." + body.substr(0, colon)] = unquote(body.substr(colon + 2));
    }
  }
  return out;
}

std::string origin(const Config& config, const std::string& key) { return origin_of(config, key); }

void fail_key(const Config& config, const std::string& key, const std::string& problem,
              const std::string& origin_key) {
  fail(origin_of(config, origin_key.empty() ? key : origin_key), key, problem);
}

void check_environment(const Config& c) {
  const DataConfig& d = c.data;
  const data::DataKind* kind = data::find_data_kind(d.kind);
  if (kind && kind->reads_file && d.path.empty())
    fail(origin_of(c, "data.kind"), "data.path",
         "data.kind '" + d.kind + "' reads a file, but data.path is not set");
  if (kind && kind->labels_file && d.labels_path.empty())
    fail(origin_of(c, "data.path"), "data.labels_path",
         "data.kind '" + d.kind + "' needs the IDX labels file for data.path");
  if (kind && kind->labels_file && !d.val_path.empty() && d.val_labels_path.empty())
    fail(origin_of(c, "data.val_path"), "data.val_labels_path",
         "data.kind '" + d.kind + "' needs the IDX labels file for data.val_path");
  check_readable(c, "data.path", d.path);
  check_readable(c, "data.labels_path", d.labels_path);
  check_readable(c, "data.val_path", d.val_path);
  check_readable(c, "data.val_labels_path", d.val_labels_path);
  check_readable(c, "model.init_from", c.model.init_from,
                 " (the final_params.bin of an earlier run: run that config first)");
}

}  // namespace atl::config
