// The versioned wire frame: one header format for every payload (docs/wire_format.md).
//
//   magic "ATLF" | version u8 = 1 | flags u8 | dtype u8 | stage count u8 | stages...
//   | element count u64 | ndim u8 | dims u64 x ndim | seed u64 | payload length u64
//   | checksum u64 (xxhash64, seed 0, over every header byte before it and the payload)
//   | payload
//
// All multi-byte fields are little-endian. Ids are frozen; a new field or stage parameter
// layout means a new version. The payload is what the chain produces (compression/codec.h).
//
// parse_frame validates the whole frame before anyone touches output memory, allocates
// no buffers, and never reads outside [bytes, bytes + size). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compression/chain.h"
#include "src/base/status.h"

namespace atl::compression {

// Frozen. Only fp32 travels today.
enum class DType : uint8_t { kFp32 = 0 };

constexpr uint8_t kFrameMagic[4] = {'A', 'T', 'L', 'F'};
constexpr uint8_t kFrameVersion = 1;
constexpr int kMaxFrameDims = 8;
// Header bytes before the stage list: magic, version, flags, dtype, stage count.
constexpr size_t kFramePrefixBytes = 8;
// Smallest header: empty chain, one dimension.
constexpr size_t kMinFrameHeaderBytes = kFramePrefixBytes + 8 + 1 + 8 + 8 + 8 + 8;
static_assert(kMinFrameHeaderBytes == 49, "frame v1 header layout changed");

// Bytes a stage takes in the header: its id and its parameters (docs/wire_format.md).
size_t stage_wire_bytes(StageId id);

struct FrameHeader {
  uint8_t flags = 0;                  // v1: must be 0
  DType dtype = DType::kFp32;
  Chain chain;                        // validated, canonical
  uint64_t elements = 0;              // <= kMaxElements
  int ndim = 1;                       // 1..kMaxFrameDims; product of dims == elements
  uint64_t dims[kMaxFrameDims] = {};
  uint64_t seed = 0;                  // drives randk and stochastic rounding
  uint64_t payload_size = 0;          // within payload_bounds(chain, elements)
};

// A parsed frame. `payload` points into the parsed bytes (not owned).
struct FrameView {
  FrameHeader header;
  size_t header_size = 0;
  size_t frame_size = 0;              // header_size + payload_size
  const uint8_t* payload = nullptr;
};

// Appends a header for `h` (payload_size and checksum left 0) to `out`; returns the offset
// of the frame's first byte. Append the payload, then call finish_frame(out, start).
size_t begin_frame(const FrameHeader& h, std::vector<uint8_t>& out);
// Fills in the payload length (everything after the header) and the checksum.
void finish_frame(std::vector<uint8_t>& out, size_t start);

// Parses the frame at bytes[0..size). kCorrupt, with a message naming the field, when the
// frame is truncated or has trailing bytes, has a wrong magic/version/flags/dtype, an
// unknown stage, out-of-range or non-canonical stage parameters, too many elements, a shape
// that disagrees with the count, a payload length the chain cannot produce for that count,
// or a bad checksum. Fields are checked in the order they appear, the checksum last.
Status parse_frame(const uint8_t* bytes, size_t size, FrameView* view);

// For tests and fuzzing: recomputes the checksum of a frame whose header parses (ignoring the
// old checksum and trailing/missing payload bytes), so mutations reach the deeper checks.
// Returns false (and changes nothing) when the header does not parse.
bool reseal_frame(uint8_t* bytes, size_t size);

}  // namespace atl::compression
