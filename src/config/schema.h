// The config schema: one descriptor per YAML key (section, name, where the value lives in
// Config, which values are allowed), gathered from each section struct's fields() (the one
// place a key is declared: config.h, algorithms/options.h). config.cpp walks this table to
// parse, validate and emit.
//
// Internal to atoll_config (no yaml-cpp here, so it can be unit-tested on its own). All
// functions are pure; the table is built once, immutable, and safe to read from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "src/base/fields.h"
#include "src/config/config.h"

namespace atl::config::schema {

// An enum-like field (fields::Choice): read and written by its name, one of Check::names.
struct ChoiceRef {
  std::function<std::string()> get;
  std::function<void(const std::string&)> set;  // `name` must be one of the names
};

// Where one field's value lives inside a Config. The alternative says the YAML type.
using FieldRef = std::variant<int*, int64_t*, uint64_t*, double*, bool*, std::string*,
                              std::vector<int>*, std::vector<double>*,
                              std::vector<std::string>*, std::vector<IslandEvent>*,
                              std::vector<NetworkLink>*, std::vector<ModuleLevel>*, PerIsland*, ChoiceRef>;

// Allowed values of one field (fields::Rule): an optional numeric interval and/or a list of
// names. An empty Check allows every value of the field's type.
struct Check : fields::Rule {
  Check() = default;
  Check(fields::Rule rule) : fields::Rule(std::move(rule)) {}  // NOLINT: a Rule is a Check

  // "" when `v` is allowed, else the problem, e.g. "must be >= 1 (got -5)".
  std::string check_number(double v) const;
  std::string check_name(const std::string& v) const;
};

Check at_least(double lo);              // [lo, inf)
Check above(double lo);                 // (lo, inf)
Check closed_open(double lo, double hi);  // [lo, hi)
Check open_closed(double lo, double hi);  // (lo, hi]
Check open_open(double lo, double hi);    // (lo, hi)
Check closed(double lo, double hi);       // [lo, hi]
Check one_of(std::vector<std::string> names);

struct Field {
  std::string name;                         // YAML key inside its section
  std::function<FieldRef(Config&)> ref;     // where the value lives
  Check check;                              // allowed values
};

// A key of one record in a list of records (islands.events, network.links).
template <typename R>
struct RecordField {
  std::string name;
  std::function<FieldRef(R&)> ref;
  Check check;
};
const std::vector<RecordField<IslandEvent>>& event_fields();
const std::vector<RecordField<NetworkLink>>& link_fields();
const std::vector<RecordField<ModuleLevel>>& level_fields();

struct Section {
  std::string name;                         // YAML top-level key
  std::vector<Field> fields;                // in the order to_yaml writes them
};

// Every section and field, in config.h order.
const std::vector<Section>& sections();
const Section* find_section(std::string_view name);
const Field* find_field(const Section& section, std::string_view name);

// "a, b, c".
std::string join(const std::vector<std::string>& names);

// Closest of `candidates` to `word` by edit distance (insert, delete, substitute, swap two
// neighbours), if it is within max(2, |word|/3); ties go to the earliest candidate.
std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates);

// Strict YAML-1.2-core style scalars: "[-+]?[0-9]+" for integers; decimal or exponent
// notation for numbers. The whole text must be consumed; nullopt otherwise (or on overflow).
std::optional<int64_t> parse_int(std::string_view text);
std::optional<uint64_t> parse_uint(std::string_view text);
std::optional<double> parse_double(std::string_view text);

// Shortest text that parses back to exactly `v` ("0.001", "1e-08"), with ".0" added to
// integral values so that a reader sees a float.
std::string format_double(double v);

}  // namespace atl::config::schema
