// Fault injection: 10,000 random mutations of valid frames of several pipelines (bit flips,
// byte overwrites, truncations, extensions, splices of two frames) go to decode, which must
// return either a clean kCorrupt or a valid decode, never crash or read out of bounds (run
// under -DATOLL_SANITIZE=address,undefined to see the latter). Half of the mutants are
// resealed (checksum recomputed) so they reach the checks behind the checksum: the chain,
// the sizes, zstd, the varint indices and the quantizers' bytes.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "compression/frame.h"
#include "tests/compression/test_util.h"

namespace atl::compression {
namespace {

using namespace test;  // NOLINT

TEST(Mutation, TenThousandMutantsDecodeCleanly) {
  const std::vector<std::vector<StageConfig>> chains = {
      {},
      {zstd(1)},
      {quantizer(StageId::kInt8, 16)},
      {quantizer(StageId::kInt4, 16), zstd()},
      {quantizer(StageId::kFp4, 8)},
      {quantizer(StageId::kFp8, 8), zstd(2)},
      {st(StageId::kBf16)},
      {topk(0.2)},
      {topk(0.3), quantizer(StageId::kInt8, 8), zstd()},
      {randk(0.4), st(StageId::kFp16)},
      {dct(8), topk(0.25), zstd()},
      {dct(16)},
      {topk(0.3), st(StageId::kLut2)},
  };
  std::vector<Pipeline> pipes;
  std::vector<Bytes> frames;
  std::vector<int64_t> sizes;
  std::mt19937_64 rng(20240611);
  for (size_t c = 0; c < chains.size(); ++c) {
    pipes.push_back(make(chains[c]));
    const int64_t n = 20 + static_cast<int64_t>(rng() % 200);
    sizes.push_back(n);
    frames.push_back(encode(pipes.back(), make_input(c % 2 ? Input::kSpecial : Input::kRandom, n, c), rng()));
  }
  std::map<std::string, int> outcomes;
  int ok = 0, corrupt = 0, deep = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    const size_t c = rng() % frames.size();
    Bytes f = frames[c];
    const int kind = static_cast<int>(rng() % 5);
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      switch (kind) {
        case 0: f[rng() % f.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;  // bit flip
        case 1: f[rng() % f.size()] = static_cast<uint8_t>(rng()); break;               // overwrite
        case 2: f.resize(rng() % f.size()); break;                                      // truncate
        case 3: f.resize(f.size() + 1 + rng() % 64, static_cast<uint8_t>(rng())); break;  // extend
        case 4: {  // splice: a prefix of this frame, then a suffix of another
          const Bytes& g = frames[rng() % frames.size()];
          const size_t cut = rng() % (f.size() + 1), from = rng() % (g.size() + 1);
          f.resize(cut);
          f.insert(f.end(), g.begin() + static_cast<std::ptrdiff_t>(from), g.end());
          break;
        }
      }
    }
    if (trial % 2 && !f.empty()) reseal_frame(f.data(), f.size());
    // Mostly the right output size; sometimes another one.
    const int64_t n = rng() % 8 ? sizes[c] : static_cast<int64_t>(rng() % 300);
    Status s;
    decode(pipes[c], f, n, &s);
    ASSERT_TRUE(s.is_ok() || s.code() == StatusCode::kCorrupt) << s.to_string();
    ASSERT_TRUE(s.is_ok() || !s.message().empty());
    if (s.is_ok()) {
      ++ok;
    } else {
      ++corrupt;
      if (s.message().find("checksum") == std::string::npos) ++deep;
      ++outcomes[s.message().substr(0, s.message().find_first_of(":0123456789"))];
    }
  }
  EXPECT_EQ(ok + corrupt, 10000);
  EXPECT_GT(deep, 2000) << "mutants should reach the checks behind the checksum";
  EXPECT_GE(outcomes.size(), 10u) << "expected many different rejection reasons";
  for (const auto& [why, count] : outcomes) std::printf("  %5d  %s\n", count, why.c_str());
  std::printf("  %5d  decoded fine (mutations that left a valid frame)\n", ok);
}

}  // namespace
}  // namespace atl::compression
