// The pipelines the frame fuzzer decodes with (frame_fuzz.cpp) and the seed corpus holds
// one valid frame of (make_corpus.cpp): every stage alone, and combinations covering every
// slot pairing. Append only: corpus files are named after their index.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "compression/chain.h"

namespace atl::compression::fuzz {

inline StageConfig stage(StageId id, int64_t block = 16, Rounding r = Rounding::kNearest) {
  StageConfig s;
  s.id = id;
  s.block = block;
  s.rounding = r;
  s.fraction = 0.25;
  s.chunk = 8;
  s.level = 3;
  return s;
}

inline std::vector<Chain> make_chains() {
  const std::vector<std::vector<StageConfig>> lists = {
      {},
      {stage(StageId::kDct)},
      {stage(StageId::kTopK)},
      {stage(StageId::kRandK)},
      {stage(StageId::kFp16)},
      {stage(StageId::kBf16)},
      {stage(StageId::kInt8)},
      {stage(StageId::kInt4)},
      {stage(StageId::kFp4)},
      {stage(StageId::kFp8)},
      {stage(StageId::kZstd)},
      {stage(StageId::kInt8, 16, Rounding::kStochastic), stage(StageId::kZstd)},
      {stage(StageId::kTopK), stage(StageId::kInt4), stage(StageId::kZstd)},
      {stage(StageId::kDct), stage(StageId::kTopK), stage(StageId::kFp8), stage(StageId::kZstd)},
      {stage(StageId::kRandK), stage(StageId::kFp4)},
      {stage(StageId::kDct), stage(StageId::kBf16)},
  };
  std::vector<Chain> chains;
  for (const auto& l : lists) {
    auto c = make_chain(l);
    if (!c.is_ok()) std::abort();
    chains.push_back(*c);
  }
  return chains;
}

inline const std::vector<Chain>& chains() {
  static const std::vector<Chain> c = make_chains();
  return c;
}

}  // namespace atl::compression::fuzz
