#include "compression/stage.h"

#include <array>
#include <utility>

namespace atl::compression {

const char* stage_name(StageId id) {
  for (const auto& s : kStageInfo) {
    if (s.id == id) return s.name;
  }
  return "unknown";
}

bool stage_from_name(const std::string& name, StageId* id) {
  for (const auto& s : kStageInfo) {
    if (name == s.name) {
      if (id) *id = s.id;
      return true;
    }
  }
  return false;
}

std::vector<std::string> stage_names() {
  std::vector<std::string> names;
  for (const auto& s : kStageInfo) names.emplace_back(s.name);
  return names;
}

}  // namespace atl::compression
