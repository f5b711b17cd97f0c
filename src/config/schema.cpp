// The table of every config key and its allowed values, gathered from the fields() of each
// section's struct (config.h; for `algorithm:`, each algorithm's options struct in
// algorithms/options.h): a key is declared there once.
#include "src/config/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace atl::config::schema {
namespace {

// Collects the keys and rules of a struct's fields(), in order.
struct Collector {
  std::vector<std::pair<std::string, Check>> keys;
  template <class T>
  void field(const char* key, T&, const fields::Rule& rule = {}) {
    keys.emplace_back(key, Check(rule));
  }
  template <class E>
  void choice(const char* key, E&, std::initializer_list<fields::Choice<E>> names) {
    Check check;
    for (const auto& n : names) check.names.emplace_back(n.name);
    keys.emplace_back(key, std::move(check));
  }
};

// The member behind one key of a struct's fields().
struct Finder {
  std::string_view key;
  std::optional<FieldRef> out;
  template <class T>
  void field(const char* k, T& member, const fields::Rule& = {}) {
    if (k == key) out = FieldRef(&member);
  }
  template <class E>
  void choice(const char* k, E& member, std::initializer_list<fields::Choice<E>> names) {
    if (k != key) return;
    std::vector<fields::Choice<E>> list(names);
    out = ChoiceRef{[&member, list] {
                      for (const auto& c : list)
                        if (c.value == member) return std::string(c.name);
                      return std::string();
                    },
                    [&member, list](const std::string& name) {
                      for (const auto& c : list)
                        if (name == c.name) member = c.value;
                    }};
  }
};

template <class S>
FieldRef find(S& s, const std::string& key) {
  Finder f{key, std::nullopt};
  s.fields(f);
  return *f.out;  // `key` came from the same fields()
}

// The keys of one struct's fields(), each with the way to its member from an instance.
template <class S>
std::vector<std::pair<std::string, Check>> keys_of() {
  Collector keys;
  S prototype;
  prototype.fields(keys);
  return std::move(keys.keys);
}

// A section of the table: the keys of (Config.*member).fields().
template <class S>
Section section(std::string name, S Config::*member) {
  Section s{std::move(name), {}};
  for (auto& [key, check] : keys_of<S>())
    s.fields.push_back({key, [member, key](Config& c) { return find(c.*member, key); }, std::move(check)});
  return s;
}

// The keys of one record type of a list (IslandEvent, NetworkLink).
template <class R>
std::vector<RecordField<R>> records() {
  std::vector<RecordField<R>> out;
  for (auto& [key, check] : keys_of<R>())
    out.push_back({key, [key](R& r) { return find(r, key); }, std::move(check)});
  return out;
}

// The member behind `key` of the chosen algorithm's options (algorithms::AlgorithmParams).
FieldRef algorithm_ref(algorithms::AlgorithmOptions& a, const std::string& key) {
  return std::visit(
      [&](auto& p) {
        Finder f{key, std::nullopt};
        p.fields(f);
        if (!f.out) throw std::logic_error("algorithm '" + a.name + "' has no key '" + key + "'");
        return *f.out;
      },
      a.params);
}

// The `algorithm:` section: `name`, then every key of any algorithm's options struct, once,
// in the order the alternatives of algorithms::AlgorithmParams first declare it, with the
// rule of the first that declares it (AlgorithmKeysTest holds a shared key to one rule). A
// key refers to the chosen algorithm's member: config.cpp applies the section's other keys
// once the name is final, and refuses those the chosen algorithm does not have.
Section algorithm_section() {
  Section s{"algorithm", {}};
  s.fields.push_back({"name", [](Config& c) { return FieldRef(&c.algorithm.name); }, Check()});
  for (const std::string& name : algorithms::params_names()) {
    algorithms::AlgorithmParams prototype = *algorithms::default_params(name);
    Collector keys;
    std::visit([&](auto& p) { p.fields(keys); }, prototype);
    for (auto& [key, check] : keys.keys) {
      if (find_field(s, key)) continue;
      s.fields.push_back({key, [key](Config& c) { return algorithm_ref(c.algorithm, key); }, std::move(check)});
    }
  }
  return s;
}

// Every section, in the order to_yaml writes them (`compression`, a list of stages, is
// config.cpp's own).
std::vector<Section> build() {
  return {section("run", &Config::run),
          section("model", &Config::model),
          section("data", &Config::data),
          section("train", &Config::train),
          section("islands", &Config::islands),
          algorithm_section(),
          section("transport", &Config::transport),
          section("compute", &Config::compute),
          section("network", &Config::network),
          section("hosts", &Config::hosts),
          section("slurm", &Config::slurm),
          section("dipaco", &Config::dipaco),
          section("checkpoint", &Config::checkpoint)};
}

// Bounds print without a trailing ".0": "[0, 1)", ">= 1".
std::string bound(double v) {
  std::string s = format_double(v);
  if (s.size() > 2 && s.ends_with(".0")) s.resize(s.size() - 2);
  return s;
}

}  // namespace

std::string Check::check_number(double v) const {
  // Written so that NaN fails every bound.
  const bool lo_ok = !lo || (lo_open ? v > *lo : v >= *lo);
  const bool hi_ok = !hi || (hi_open ? v < *hi : v <= *hi);
  if (lo_ok && hi_ok) return "";
  std::string rule;
  if (lo && hi) {
    rule = "must be in " + std::string(lo_open ? "(" : "[") + bound(*lo) + ", " + bound(*hi) +
           (hi_open ? ")" : "]");
  } else if (lo) {
    rule = std::string(lo_open ? "must be > " : "must be >= ") + bound(*lo);
  } else {
    rule = std::string(hi_open ? "must be < " : "must be <= ") + bound(*hi);
  }
  const bool integral = std::trunc(v) == v && std::fabs(v) < 1e18;
  return rule + " (got " + (integral ? std::to_string(static_cast<int64_t>(v)) : format_double(v)) +
         ")";
}

std::string Check::check_name(const std::string& v) const {
  if (names.empty() || std::find(names.begin(), names.end(), v) != names.end()) return "";
  std::string msg = "'" + v + "' is not one of: " + join(names);
  if (auto near = closest(v, names)) msg += " (did you mean '" + *near + "'?)";
  return msg;
}

Check at_least(double lo) { return fields::at_least(lo); }
Check above(double lo) { return fields::above(lo); }
Check closed_open(double lo, double hi) { return fields::closed_open(lo, hi); }
Check open_closed(double lo, double hi) { return fields::open_closed(lo, hi); }
Check open_open(double lo, double hi) { return fields::open_open(lo, hi); }
Check closed(double lo, double hi) { return fields::closed(lo, hi); }
Check one_of(std::vector<std::string> names) {
  Check c;
  c.names = std::move(names);
  return c;
}

const std::vector<RecordField<IslandEvent>>& event_fields() {
  static const std::vector<RecordField<IslandEvent>> table = records<IslandEvent>();
  return table;
}

const std::vector<RecordField<NetworkLink>>& link_fields() {
  static const std::vector<RecordField<NetworkLink>> table = records<NetworkLink>();
  return table;
}

const std::vector<RecordField<ModuleLevel>>& level_fields() {
  static const std::vector<RecordField<ModuleLevel>> table = records<ModuleLevel>();
  return table;
}

const std::vector<Section>& sections() {
  static const std::vector<Section> table = build();
  return table;
}

const Section* find_section(std::string_view name) {
  for (const auto& s : sections())
    if (s.name == name) return &s;
  return nullptr;
}

const Field* find_field(const Section& section, std::string_view name) {
  for (const auto& f : section.fields)
    if (f.name == name) return &f;
  return nullptr;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
  // Optimal-string-alignment distance: Levenshtein plus adjacent transpositions, so that
  // "modle" is one edit from "model".
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    return d[a.size()][b.size()];
  };
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::optional<int64_t> parse_int(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_uint(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+' || text[0] == '-') return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v,
                                   std::chars_format::general);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest exact round-trip
  std::string s(buf, ec == std::errc() ? end : buf);
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace atl::config::schema
