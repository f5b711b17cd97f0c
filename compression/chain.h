// The stage chain of a pipeline: canonical slots, parameter ranges, and what a chain implies
// for the payload of n elements. Shared by Pipeline::make and the frame parser, so a chain
// that a pipeline refuses is also a frame the decoder refuses.
//
// Pure functions over small value types; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compression/stage.h"
#include "src/base/status.h"

namespace atl::compression {

// A chain lists its stages' slots (Slot, compression/stage.h) in strictly increasing order.

// Bounds on stage parameters and sizes. The frame parser enforces the same ones.
constexpr int kMaxStages = 4;                         // one stage per slot
constexpr int64_t kMaxElements = int64_t{1} << 31;    // elements in one frame (<= 2^31)
constexpr int64_t kMaxDctChunk = 256;                 // dct chunk s in [1, 256]
constexpr int64_t kMaxBlock = int64_t{1} << 24;       // quantizer block in [1, 2^24]
constexpr int kMinZstdLevel = 1;
constexpr int kMaxZstdLevel = 19;
constexpr size_t kMaxVarintBytes = 5;                 // LEB128 of a value < 2^32

// True for the ten ids of stage.h (a raw byte off the wire may be anything).
bool is_known_stage(uint8_t raw_id);
// Slot of a known id (throws std::invalid_argument for an unknown one).
Slot slot_of(StageId id);
const char* slot_name(Slot slot);

// At most kMaxStages stages, validated and canonical (see make_chain). Copyable value.
struct Chain {
  std::array<StageConfig, kMaxStages> stages{};
  int size = 0;

  // The stage in `slot`, or nullptr when the chain leaves that slot empty.
  const StageConfig* slot(Slot s) const;
  bool empty() const { return size == 0; }
};

// The canonical form of a known stage: fields it does not read reset to their defaults (a
// topk/randk with count > 0 drops its fraction). same_stage: equal id and wire parameters.
StageConfig canonical_stage(const StageConfig& st);
bool same_stage(const StageConfig& a, const StageConfig& b);

// Equal wire parameters, stage by stage (both chains canonical).
bool operator==(const Chain& a, const Chain& b);
bool operator!=(const Chain& a, const Chain& b);

// OK, or kInvalidArgument naming the first offending stage by its 1-based position and
// name: "stage 2 'zstd' must be last", "stage 1 'int4': block must be in [1, 16777216], got 0".
Status validate_chain(const StageConfig* stages, size_t count);

// Validates and canonicalises: fields a stage does not read are reset to their defaults
// (a topk with count > 0 drops its fraction), so equal behaviour means equal chains.
StatusOr<Chain> make_chain(const std::vector<StageConfig>& stages);

// "int4(block=128)+zstd(3)"; "fp32" for the empty chain.
std::string describe_chain(const Chain& chain);

// Elements a sparsifier keeps out of n: count > 0 ? min(count, n) : clamp(ceil(fraction*n),
// 1, n) computed in IEEE double; 0 when n = 0.
int64_t kept_count(const StageConfig& sparsify, int64_t n);

// Bytes of m values in the quantize slot (raw little-endian fp32 when the slot is empty).
size_t value_bytes(const Chain& chain, int64_t m);

// What a chain implies for n elements (docs/wire_format.md, "Payload"):
//   values  = kept_count (sparsifier) or n values, value_bytes of them;
//   inner   = the serialised output of slots 1-3: topk prefixes 1..5 varint bytes per index;
//   payload = inner, or a zstd frame of inner (at most ZSTD_compressBound(max_inner) bytes).
struct PayloadBounds {
  int64_t values = 0;      // values that travel
  size_t min_inner = 0;    // bounds on the slot 1-3 bytes
  size_t max_inner = 0;
  size_t max_payload = 0;  // bound on the frame's payload length
  size_t min_payload = 0;
};
PayloadBounds payload_bounds(const Chain& chain, int64_t n);

}  // namespace atl::compression
