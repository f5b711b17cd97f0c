// libFuzzer target: the frame parser and every stage's decoder (compression/codec.h, the
// libtorch-free core that Pipeline::decode calls), on hostile bytes.
//
// Input: byte 0 picks the pipeline (kChains), byte 1 holds options, the rest is the frame.
//   bit 0  reseal the frame's checksum first (frame.h reseal_frame), so mutations reach the
//          checks behind it: chain, sizes, zstd, varint indices, quantizer bytes;
//   bit 1  decode into the element count the header declares (when it parses and is at
//          most kMaxFuzzElements) instead of byte 2's small count.
// A crash, a sanitizer report or a Status other than ok/kCorrupt is a finding.
// Build and run: scripts/fuzz.sh (clang, -DATOLL_FUZZ=ON).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "compression/codec.h"
#include "compression/frame.h"
#include "tests/fuzz/fuzz_chains.h"

namespace {
constexpr int64_t kMaxFuzzElements = int64_t{1} << 20;  // keeps RSS far below libFuzzer's 2 GB
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const auto& all = atl::compression::fuzz::chains();
  const atl::compression::Chain& chain = all[data[0] % all.size()];
  const uint8_t options = data[1];
  int64_t n = data[2];
  std::vector<uint8_t> frame(data + 3, data + size);
  if ((options & 1) && !frame.empty()) atl::compression::reseal_frame(frame.data(), frame.size());
  if (options & 2) {
    atl::compression::FrameView v;
    if (atl::compression::parse_frame(frame.data(), frame.size(), &v).is_ok() &&
        v.header.elements <= static_cast<uint64_t>(kMaxFuzzElements)) {
      n = static_cast<int64_t>(v.header.elements);
    }
  }
  std::vector<float> out(static_cast<size_t>(n) + 1);  // +1: a non-null pointer for n = 0
  const atl::Status s = atl::compression::decode_frame(chain, frame.data(), frame.size(), out.data(), n);
  if (!s.is_ok() && s.code() != atl::StatusCode::kCorrupt) std::abort();
  return 0;
}
