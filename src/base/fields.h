// Declaring a component's options once. The options struct keeps its members, each with its
// default and a one-line comment, and lists its config keys in one member template:
//
//   template <class V> void fields(V& v) {
//     v.field("inner_steps", inner_steps, fields::at_least(1));
//     v.choice("overlap", overlap, {{"none", Overlap::kNone}, {"delayed", Overlap::kDelayed}});
//   }
//
// src/config walks that list (it is the only reader of YAML): it parses the section,
// rejecting unknown keys with FILE:LINE and a "did you mean", wrong types and values outside
// the rule; it writes the resolved config in the listed order; the sweep planner learns the
// keys from it. A component never sees YAML. `v` is any visitor with these member templates:
//   void field(const char* key, T& member, const Rule& rule = {});
//        T: int, int64_t, uint64_t, double, bool, std::string, std::vector of int, double or
//        std::string, or a list of records that have fields() themselves
//   void choice(const char* key, E& member, std::initializer_list<Choice<E>> names);
//        an enum (or bool) written as one of `names`
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace atl::fields {

// Allowed values: numbers in an interval (for a list: every element) and/or strings from a
// list of names. An empty Rule allows every value of the field's type.
struct Rule {
  std::optional<double> lo, hi;
  bool lo_open = false;            // true: value > lo (else >= lo)
  bool hi_open = false;            // true: value < hi (else <= hi)
  std::vector<std::string> names;  // non-empty: a string must be one of these
};

inline Rule at_least(double lo) { return {lo, std::nullopt, false, false, {}}; }     // [lo, inf)
inline Rule above(double lo) { return {lo, std::nullopt, true, false, {}}; }         // (lo, inf)
inline Rule closed(double lo, double hi) { return {lo, hi, false, false, {}}; }      // [lo, hi]
inline Rule closed_open(double lo, double hi) { return {lo, hi, false, true, {}}; }  // [lo, hi)
inline Rule open_closed(double lo, double hi) { return {lo, hi, true, false, {}}; }  // (lo, hi]
inline Rule open_open(double lo, double hi) { return {lo, hi, true, true, {}}; }     // (lo, hi)
inline Rule one_of(std::initializer_list<const char*> names) {
  return {std::nullopt, std::nullopt, false, false, {names.begin(), names.end()}};
}
inline Rule one_of(std::vector<std::string> names) {  // names from a registry's table
  return {std::nullopt, std::nullopt, false, false, std::move(names)};
}

// One value of an enum-like option and its name in the config.
template <class E>
struct Choice {
  const char* name;
  E value;
};

}  // namespace atl::fields
