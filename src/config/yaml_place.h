// The one-line user error of a config or sweep file, and the place in the file it points at:
// "FILE:LINE: key 'KEY': PROBLEM". Shared by the config parser and the sweep parser, so
// that both point at a key the same way.
#pragma once

#include <yaml-cpp/mark.h>

#include <string>

#include "src/base/status.h"

namespace atl::config::yaml_place {

// Throws the one-line UserError "WHERE: key 'KEY': PROBLEM" (parts left out when empty).
[[noreturn]] inline void fail(const std::string& where, const std::string& key, const std::string& problem) {
  std::string msg = where.empty() ? "" : where + ": ";
  if (!key.empty()) msg += "key '" + key + "': ";
  throw UserError(msg + problem);
}

// "FILE:LINE" (1-based), or just the source when yaml-cpp has no position or the source is
// a command-line override ("--set ..."), which has no lines.
inline std::string at(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null() || source.rfind("--set ", 0) == 0) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

}  // namespace atl::config::yaml_place
