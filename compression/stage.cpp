#include "compression/stage.h"

#include <array>
#include <utility>

namespace atl::compression {

namespace {
// The registry of stage names: one row per StageId, in wire-id order.
constexpr std::array<std::pair<StageId, const char*>, 10> kStages = {{
    {StageId::kDct, "dct"},
    {StageId::kTopK, "topk"},
    {StageId::kRandK, "randk"},
    {StageId::kFp16, "fp16"},
    {StageId::kBf16, "bf16"},
    {StageId::kInt8, "int8"},
    {StageId::kInt4, "int4"},
    {StageId::kFp4, "fp4"},
    {StageId::kFp8, "fp8"},
    {StageId::kZstd, "zstd"},
}};
}  // namespace

const char* stage_name(StageId id) {
  for (const auto& [sid, name] : kStages) {
    if (sid == id) return name;
  }
  return "unknown";
}

bool stage_from_name(const std::string& name, StageId* id) {
  for (const auto& [sid, n] : kStages) {
    if (name == n) {
      if (id) *id = sid;
      return true;
    }
  }
  return false;
}

std::vector<std::string> stage_names() {
  std::vector<std::string> names;
  names.reserve(kStages.size());
  for (const auto& [sid, name] : kStages) names.emplace_back(name);
  return names;
}

}  // namespace atl::compression
