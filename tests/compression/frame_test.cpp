// The wire frame (compression/frame.h, docs/wire_format.md): the golden v1 header layout,
// every truncation and every single-bit flip of valid frames, wrong version and magic,
// oversized counts, chains a pipeline does not carry; and Pipeline::make's validation.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <bit>
#include <cstring>

#include "compression/chain.h"
#include "compression/frame.h"
#include "compression/stage_ops.h"
#include "tests/compression/test_util.h"

namespace atl::compression {
namespace {

using namespace test;  // NOLINT

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Pipelines whose frames the validation tests damage.
std::vector<std::vector<StageConfig>> damaged_pipelines() {
  return {{},
          {zstd()},
          {quantizer(StageId::kInt4, 16)},
          {topk(0.2), quantizer(StageId::kInt8, 8)},
          {randk(0.5), st(StageId::kFp16)},
          {dct(8), topk(0.25), quantizer(StageId::kFp4, 16), zstd(5)},
          {topk(0.3), zstd(1)}};
}

Status decode_status(const Pipeline& p, const Bytes& b, int64_t n) {
  Status s;
  decode(p, b, n, &s);
  return s;
}

// The two halves of the stage registry describe the same stages, row for row, and each
// behaviour row sets exactly the members of its stage's slot (compression/stage_ops.h).
TEST(StageRegistry, EveryStageHasItsSlotsBehaviourAndNoOther) {
  const auto& ops = stage_ops_table();
  ASSERT_EQ(ops.size(), std::size(kStageInfo));
  for (size_t i = 0; i < ops.size(); ++i) {
    const StageInfo& info = kStageInfo[i];
    const StageOps& o = ops[i];
    EXPECT_EQ(o.id, info.id) << info.name;
    EXPECT_EQ(&stage_ops(info.id), &o) << info.name;
    EXPECT_EQ(find_stage_info(info.id), &info) << info.name;
    const bool transform = o.forward && o.inverse, sparsify = o.select != nullptr,
               quantize = o.value_bytes && o.encode && o.decode,
               lossless = o.compress && o.decompress && o.compress_bound;
    EXPECT_EQ(transform, info.slot == Slot::kTransform) << info.name;
    EXPECT_EQ(sparsify, info.slot == Slot::kSparsify) << info.name;
    EXPECT_EQ(quantize, info.slot == Slot::kQuantize) << info.name;
    EXPECT_EQ(lossless, info.slot == Slot::kLossless) << info.name;
    EXPECT_EQ(transform + sparsify + quantize + lossless, 1) << info.name;
    if (!sparsify) {
      EXPECT_FALSE(o.sends_indices) << info.name;
    }
  }
  EXPECT_THROW(stage_ops(static_cast<StageId>(200)), std::invalid_argument);
  EXPECT_EQ(find_stage_info(static_cast<StageId>(0)), nullptr);
}

TEST(Frame, GoldenV1HeaderLayout) {
  const Pipeline p = make({quantizer(StageId::kInt8, 32), zstd(7)});
  const std::vector<float> x = make_input(Input::kRandom, 100);
  const Bytes f = encode(p, x, 0x0102030405060708ull);
  const uint8_t prefix[] = {'A', 'T', 'L', 'F', 1, 0, 0, 2};
  ASSERT_EQ(std::memcmp(f.data(), prefix, 8), 0);
  const uint8_t stages[] = {6, 32, 0, 0, 0, 0, 10, 7};  // int8 block=32 nearest; zstd level 7
  ASSERT_EQ(std::memcmp(f.data() + 8, stages, 8), 0);
  EXPECT_EQ(le64(f.data() + 16), 100u);              // element count
  EXPECT_EQ(f[24], 1);                                // ndim
  EXPECT_EQ(le64(f.data() + 25), 100u);              // dims[0]
  EXPECT_EQ(le64(f.data() + 33), 0x0102030405060708ull);  // seed
  const size_t header = 57;
  EXPECT_EQ(le64(f.data() + 41), f.size() - header);  // payload length
  XXH64_state_t* s = XXH64_createState();
  XXH64_reset(s, 0);
  XXH64_update(s, f.data(), 49);
  XXH64_update(s, f.data() + header, f.size() - header);
  EXPECT_EQ(le64(f.data() + 49), XXH64_digest(s));
  XXH64_freeState(s);

  // The empty pipeline: a 49-byte header, then raw little-endian fp32.
  const Bytes raw = encode(make({}), {1.0f, -2.0f});
  ASSERT_EQ(raw.size(), kMinFrameHeaderBytes + 8);
  EXPECT_EQ(raw[7], 0);
  const uint8_t one[] = {0x00, 0x00, 0x80, 0x3f};
  EXPECT_EQ(std::memcmp(raw.data() + 49, one, 4), 0);
}

TEST(Frame, EveryTruncationIsCorrupt) {
  for (const auto& stages : damaged_pipelines()) {
    const Pipeline p = make(stages);
    SCOPED_TRACE(p.describe());
    const Bytes f = encode(p, make_input(Input::kRandom, 61), 9);
    for (size_t len = 0; len < f.size(); ++len) {
      const Bytes cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
      const Status s = decode_status(p, cut, 61);
      ASSERT_EQ(s.code(), StatusCode::kCorrupt) << "length " << len;
    }
    Bytes longer = f;
    longer.push_back(0);
    const Status s = decode_status(p, longer, 61);
    ASSERT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("trailing"), std::string::npos) << s.message();
  }
}

TEST(Frame, EverySingleBitFlipIsCorrupt) {
  for (const auto& stages : damaged_pipelines()) {
    const Pipeline p = make(stages);
    SCOPED_TRACE(p.describe());
    const Bytes f = encode(p, make_input(Input::kRandom, 61), 9);
    ASSERT_TRUE(decode_status(p, f, 61).is_ok());
    for (size_t bit = 0; bit < f.size() * 8; ++bit) {
      Bytes g = f;
      g[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      ASSERT_EQ(decode_status(p, g, 61).code(), StatusCode::kCorrupt) << "bit " << bit;
    }
  }
}

// Damages one header field of a valid int8 frame, reseals when the header still parses,
// and expects kCorrupt with `expect` in the message.
void expect_field_rejected(size_t offset, uint8_t value, const std::string& expect) {
  const Pipeline p = make({quantizer(StageId::kInt8, 32)});
  Bytes f = encode(p, make_input(Input::kRandom, 40));
  f[offset] = value;
  reseal_frame(f.data(), f.size());
  const Status s = decode_status(p, f, 40);
  ASSERT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find(expect), std::string::npos) << s.message();
}

TEST(Frame, HeaderFieldsAreValidated) {
  expect_field_rejected(0, 'X', "bad magic");
  expect_field_rejected(4, 2, "version 2");
  expect_field_rejected(4, 0, "version 0");
  expect_field_rejected(5, 1, "flags");
  expect_field_rejected(6, 1, "dtype");
  expect_field_rejected(7, 5, "stage count");
  expect_field_rejected(8, 0, "unknown stage id 0");
  expect_field_rejected(8, 12, "unknown stage id 12");  // 11 is lut2
  expect_field_rejected(8, 255, "unknown stage id 255");
  expect_field_rejected(9, 0, "block must be in");         // block 0
  expect_field_rejected(13, 2, "unknown rounding");
  expect_field_rejected(8, 10, "stage chain");             // zstd level 32
  // int8(block=32) frame: stage @8..13, element count @14, ndim @22, dims @23, seed @31,
  // payload length @39, checksum @47, payload @55.
  expect_field_rejected(20, 1, "element count");           // 2^48 + 40 elements
  expect_field_rejected(22, 0, "ndim 0");
  expect_field_rejected(22, 9, "ndim 9");
  expect_field_rejected(23, 41, "shape holds 41 elements");
  expect_field_rejected(44, 1, "payload length");           // + 2^40 bytes
}

TEST(Frame, OversizedAndInconsistentCounts) {
  const Pipeline p = make({});
  const Bytes f = encode(p, make_input(Input::kRandom, 10));
  auto with = [&](size_t offset, uint64_t v, bool reseal = true) {
    Bytes g = f;
    put64(g.data() + offset, v);
    if (reseal) reseal_frame(g.data(), g.size());
    return decode_status(p, g, 10);
  };
  // v1 empty chain: count @8, ndim @16, dims @17, seed @25, payload length @33, checksum @41.
  EXPECT_NE(with(8, (uint64_t{1} << 31) + 1).message().find("element count"), std::string::npos);
  EXPECT_NE(with(8, ~uint64_t{0}).message().find("element count"), std::string::npos);
  EXPECT_NE(with(8, 11).message().find("shape holds 10"), std::string::npos);
  EXPECT_NE(with(17, uint64_t{1} << 40).message().find("dim 0"), std::string::npos);
  EXPECT_NE(with(33, ~uint64_t{0}).message().find("payload length"), std::string::npos);
  EXPECT_NE(with(33, 39).message().find("payload length"), std::string::npos);
  EXPECT_NE(with(41, 0, false).message().find("checksum"), std::string::npos);
  // A consistent frame of 2^31 elements that holds no payload bytes: rejected without
  // allocating anything (the payload it declares is missing).
  Bytes big = f;
  put64(big.data() + 8, uint64_t{1} << 31);
  put64(big.data() + 17, uint64_t{1} << 31);
  put64(big.data() + 33, uint64_t{1} << 33);
  big.resize(49);
  reseal_frame(big.data(), big.size());
  FrameView v;
  const Status s = parse_frame(big.data(), big.size(), &v);
  ASSERT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  // A 2-D shape whose product matches is a valid v1 frame.
  Bytes two = f;
  two[16] = 2;
  const uint8_t dims[16] = {2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0};
  two.erase(two.begin() + 17, two.begin() + 25);
  two.insert(two.begin() + 17, dims, dims + 16);
  ASSERT_TRUE(reseal_frame(two.data(), two.size()));
  ASSERT_TRUE(parse_frame(two.data(), two.size(), &v).is_ok());
  EXPECT_EQ(v.header.ndim, 2);
  EXPECT_TRUE(decode_status(p, two, 10).is_ok());
}

TEST(Frame, DecodeAcceptsOnlyItsOwnChainAndCount) {
  const std::vector<float> x = make_input(Input::kRandom, 50);
  const Bytes f = encode(make({quantizer(StageId::kInt8, 32)}), x);
  for (const auto& other : {std::vector<StageConfig>{quantizer(StageId::kInt8, 64)},
                            std::vector<StageConfig>{quantizer(StageId::kInt4, 32)},
                            std::vector<StageConfig>{quantizer(StageId::kInt8, 32, Rounding::kStochastic)},
                            std::vector<StageConfig>{quantizer(StageId::kInt8, 32), zstd()},
                            std::vector<StageConfig>{}}) {
    const Status s = decode_status(make(other), f, 50);
    ASSERT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("encoded with 'int8(block=32)'"), std::string::npos) << s.message();
  }
  const Status s = decode_status(make({quantizer(StageId::kInt8, 32)}), f, 49);
  EXPECT_NE(s.message().find("holds 50 elements"), std::string::npos) << s.message();
  // Non-canonical parameters (a topk count with a fraction) are refused even if resealed.
  Bytes t = encode(make({topk_count(5)}), x);
  ASSERT_EQ(t[8], 2);
  put64(t.data() + 17, std::bit_cast<uint64_t>(0.5));
  reseal_frame(t.data(), t.size());
  EXPECT_NE(decode_status(make({topk_count(5)}), t, 50).message().find("canonical"), std::string::npos);
}

TEST(PipelineMake, RejectsBadChainsNamingTheStage) {
  auto why = [](std::vector<StageConfig> stages) {
    StatusOr<Pipeline> p = Pipeline::make(std::move(stages));
    EXPECT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    return p.status().message();
  };
  EXPECT_EQ(why({quantizer(StageId::kInt4), zstd(), st(StageId::kFp16)}), "stage 2 'zstd' must be last");
  EXPECT_NE(why({zstd(), zstd()}).find("stage 1 'zstd' must be last"), std::string::npos);
  EXPECT_NE(why({st(StageId::kFp16), quantizer(StageId::kInt8)}).find("both fill the quantize slot"), std::string::npos);
  EXPECT_NE(why({topk(0.1), dct()}).find("stage 2 'dct' (transform) must come before stage 1 'topk'"), std::string::npos);
  EXPECT_NE(why({quantizer(StageId::kInt8), topk(0.1)}).find("transform < sparsify < quantize < lossless"), std::string::npos);
  EXPECT_NE(why({topk(0.1), randk(0.1)}).find("sparsify slot"), std::string::npos);
  EXPECT_NE(why({dct(), topk(0.1), quantizer(StageId::kInt8), zstd(), zstd()}).find("at most 4"), std::string::npos);
  EXPECT_NE(why({quantizer(StageId::kInt4, 0)}).find("stage 1 'int4': block must be in [1, 16777216], got 0"), std::string::npos);
  EXPECT_NE(why({zstd(0)}).find("level must be in [1, 19]"), std::string::npos);
  EXPECT_NE(why({zstd(20)}).find("level"), std::string::npos);
  EXPECT_NE(why({topk(0.0)}).find("fraction must be in (0, 1]"), std::string::npos);
  EXPECT_NE(why({randk(1.5)}).find("fraction"), std::string::npos);
  EXPECT_NE(why({topk(std::nan(""))}).find("fraction"), std::string::npos);
  EXPECT_NE(why({topk_count(-3)}).find("count"), std::string::npos);
  EXPECT_NE(why({dct(0)}).find("stage 1 'dct': chunk must be in [1, 256]"), std::string::npos);
  EXPECT_NE(why({dct(257)}).find("chunk"), std::string::npos);
  StageConfig bad = st(StageId::kInt8);
  bad.rounding = static_cast<Rounding>(7);
  EXPECT_NE(why({bad}).find("unknown rounding"), std::string::npos);
  StageConfig unknown = st(static_cast<StageId>(42));
  EXPECT_NE(why({unknown}).find("stage 1 has unknown id 42"), std::string::npos);
}

TEST(PipelineMake, DescribeLosslessAndCanonicalForm) {
  EXPECT_EQ(make({}).describe(), "fp32");
  EXPECT_EQ(make({quantizer(StageId::kInt4, 128), zstd(3)}).describe(), "int4(block=128)+zstd(3)");
  EXPECT_EQ(make({dct(32), topk(0.1), quantizer(StageId::kInt8, 64, Rounding::kStochastic), zstd(1)}).describe(),
            "dct(chunk=32)+topk(fraction=0.1)+int8(block=64,stochastic)+zstd(1)");
  EXPECT_EQ(make({randk(0.25), st(StageId::kFp16)}).describe(), "randk(fraction=0.25)+fp16");
  StageConfig counted = topk_count(1000);
  counted.fraction = 0.7;  // ignored: count wins, and the canonical form drops it
  const Pipeline p = make({counted});
  EXPECT_EQ(p.describe(), "topk(count=1000)");
  EXPECT_EQ(p.stages()[0].fraction, 0.0);
  EXPECT_TRUE(make({}).lossless());
  EXPECT_TRUE(make({zstd(19)}).lossless());
  EXPECT_FALSE(make({st(StageId::kFp16)}).lossless());
  EXPECT_FALSE(make({st(StageId::kFp16), zstd()}).lossless());
  EXPECT_FALSE(make({dct()}).lossless());
  std::vector<std::string> names = stage_names();
  ASSERT_EQ(names.size(), 11u);
  for (const std::string& n : names) {
    StageId id{};
    ASSERT_TRUE(stage_from_name(n, &id));
    EXPECT_EQ(stage_name(id), n);
  }
  StageId id{};
  EXPECT_FALSE(stage_from_name("int3", &id));
}

}  // namespace
}  // namespace atl::compression
