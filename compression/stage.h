// Compression stages and their frozen wire ids.
//
// A pipeline is an ordered list of stages in canonical slots, each optional:
//
//   1. transform   dct                     dense [n] -> dense [n] (orthonormal, invertible)
//   2. sparsify    topk | randk            dense [n] -> k (index, value) pairs
//   3. quantize    fp16 | bf16 | int8 | int4 | fp4 | fp8
//                                          float values -> bytes (default: raw fp32)
//   4. lossless    zstd                    bytes -> bytes (the serialised output of 1–3)
//
// A YAML list in another order is a configuration error naming the stage. Stages are pure:
// no hidden state; randomness (randk indices, stochastic rounding) comes from the frame's
// seed, so a decoder reproduces what the encoder drew.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace atl::compression {

// Wire ids. Frozen: never renumber, only append (docs/wire_format.md).
enum class StageId : uint8_t {
  kDct = 1,
  kTopK = 2,
  kRandK = 3,
  kFp16 = 4,
  kBf16 = 5,
  kInt8 = 6,
  kInt4 = 7,
  kFp4 = 8,    // E3M0 (docs/algorithms.md §2.4)
  kFp8 = 9,    // E4M3
  kZstd = 10,
  kLut2 = 11,  // 2-bit codes into a per-frame table of bin means (compression/lut2.h)
};

enum class Rounding : uint8_t { kNearest = 0, kStochastic = 1 };

// One stage as configured. Only the fields of its kind are read.
struct StageConfig {
  StageId id = StageId::kInt8;
  int64_t block = 128;        // int8/int4/fp4/fp8: elements per absmax scale block
  Rounding rounding = Rounding::kNearest;  // int8/int4/fp4/fp8
  double fraction = 0.0;      // topk/randk: fraction of elements kept, in (0, 1]
  int64_t count = 0;          // topk/randk: elements kept (used when > 0, else fraction)
  int64_t chunk = 64;         // dct: chunk length s (chunks of sc(n) = largest divisor <= s)
  int level = 3;              // zstd: compression level 1..19
};

// A stage's place in a pipeline: the canonical slots above, in the order a chain lists them.
enum class Slot : uint8_t { kTransform = 1, kSparsify = 2, kQuantize = 3, kLossless = 4 };

// The parameters a stage reads, as flags. Each family has one wire layout after the stage's
// id byte (docs/wire_format.md "Stage parameters") and one range rule (compression/chain.cpp),
// so a new stage that reads existing families needs no new parsing code.
enum StageParams : uint8_t {
  kNoParams = 0,
  kChunkParam = 1,   // chunk: u32
  kKeepParams = 2,   // count: u64, fraction: f64 (count > 0 wins)
  kBlockParams = 4,  // block: u32, rounding: u8
  kLevelParam = 8,   // level: u8
};

struct StageInfo {
  StageId id;
  const char* name;  // its name in configs and logs
  Slot slot;
  uint8_t params;    // StageParams flags
};

// The registry of stages: one row per StageId, in wire-id order (what each does in its slot
// is its row of compression/stage_ops.cpp). Config parsing (src/config) takes the stage
// names from here.
inline constexpr StageInfo kStageInfo[] = {
    {StageId::kDct, "dct", Slot::kTransform, kChunkParam},
    {StageId::kTopK, "topk", Slot::kSparsify, kKeepParams},
    {StageId::kRandK, "randk", Slot::kSparsify, kKeepParams},
    {StageId::kFp16, "fp16", Slot::kQuantize, kNoParams},
    {StageId::kBf16, "bf16", Slot::kQuantize, kNoParams},
    {StageId::kInt8, "int8", Slot::kQuantize, kBlockParams},
    {StageId::kInt4, "int4", Slot::kQuantize, kBlockParams},
    {StageId::kFp4, "fp4", Slot::kQuantize, kBlockParams},
    {StageId::kFp8, "fp8", Slot::kQuantize, kBlockParams},
    {StageId::kZstd, "zstd", Slot::kLossless, kLevelParam},
    {StageId::kLut2, "lut2", Slot::kQuantize, kNoParams},
};

// The row of `id`, or nullptr for an id no row has (a raw byte off the wire may be anything).
inline const StageInfo* find_stage_info(StageId id) {
  for (const auto& s : kStageInfo)
    if (s.id == id) return &s;
  return nullptr;
}

// The StageParams flags of `id` (kNoParams for an unknown id).
inline uint8_t stage_params(StageId id) {
  const StageInfo* s = find_stage_info(id);
  return s ? s->params : static_cast<uint8_t>(kNoParams);
}

// "int4", "zstd", ... ; and the reverse (false for an unknown name).
const char* stage_name(StageId id);
bool stage_from_name(const std::string& name, StageId* id);
std::vector<std::string> stage_names();

}  // namespace atl::compression
