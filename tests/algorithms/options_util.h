// Test helpers for algorithms::AlgorithmOptions: options of an algorithm chosen by name, with
// keys set by name where that algorithm has them (tests that run every algorithm alike).
#pragma once

#include <string>
#include <type_traits>
#include <variant>

#include "algorithms/options.h"

namespace atl::testing {

// Sets the numeric or bool key `key` of an options struct to `value`, if it has the key.
struct KeySetter {
  const std::string& key;
  double value;
  template <class T>
  void field(const char* k, T& member, const fields::Rule& = {}) {
    if constexpr (std::is_arithmetic_v<T>)
      if (key == k) member = static_cast<T>(value);
  }
  template <class E>
  void choice(const char*, E&, std::initializer_list<fields::Choice<E>>) {}
};

// Sets `key` of `o`'s algorithm options to `value` when that algorithm has the key; an
// algorithm without it is left alone.
inline void set_key(algorithms::AlgorithmOptions& o, const std::string& key, double value) {
  KeySetter setter{key, value};
  std::visit([&](auto& p) { p.fields(setter); }, o.params);
}

// Options of algorithm `name` at its defaults, then `key = value` for each pair it has.
inline algorithms::AlgorithmOptions options_of(const std::string& name,
                                               std::initializer_list<std::pair<const char*, double>> keys = {}) {
  algorithms::AlgorithmOptions o;
  o.choose(name);
  for (const auto& [key, value] : keys) set_key(o, key, value);
  return o;
}

}  // namespace atl::testing
