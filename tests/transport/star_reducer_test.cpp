// The coordinator's side of the star all-reduce without sockets: who a collective waits for,
// a member lost before contributing, a joiner's first seq, how long results are kept and
// what a late asker is told.
#include "transport/zmq/star_reducer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "transport/star.h"
#include "transport/zmq/data_wire.h"

namespace atl::transport {
namespace {

using star::TagKind;

std::vector<uint8_t> frame_of(float value, int64_t n = 4) {
  std::vector<uint8_t> f;
  compression::Pipeline().encode(at::full({n}, value), f);
  return f;
}

struct Reply {
  collectives::ResultInfo info;
  at::Tensor mean;  // undefined without a frame
};

// The reducer's answer to island `id` pulling `kind` of `seq`; nullopt while it runs.
std::optional<Reply> pull(StarReducer& r, int id, uint64_t seq, TagKind kind) {
  auto bytes = r.on_pull(id, star::tag(seq, kind));
  if (!bytes) return std::nullopt;
  Reply out;
  const size_t info = collectives::result_info_size(bytes->data(), bytes->size());
  EXPECT_GT(info, 0u);
  EXPECT_TRUE(collectives::parse_result_info(bytes->data(), info, &out.info).is_ok());
  if (bytes->size() > info) {
    out.mean = at::empty({static_cast<int64_t>(out.info.numel)});
    EXPECT_TRUE(compression::Pipeline().decode(bytes->data() + info, bytes->size() - info, out.mean).is_ok());
  }
  return out;
}

TEST(StarReducer, WaitsForEveryMemberThenKeepsTheResultUntilAskedAboutALaterOne) {
  const compression::Pipeline fp32;
  StarReducer r(fp32, 1 << 20);
  const std::vector<int> members = {0, 1};
  r.on_push(0, star::tag(0, TagKind::kData), frame_of(1), 1.0, members);
  EXPECT_FALSE(pull(r, 0, 0, TagKind::kInfo));  // island 1 has not contributed
  r.on_push(1, star::tag(0, TagKind::kData), frame_of(4), 3.0, members);
  auto info = pull(r, 0, 0, TagKind::kInfo);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->info.status, StatusCode::kOk);
  EXPECT_EQ(info->info.contributors, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(info->info.weight_sum, 4.0);
  EXPECT_FALSE(info->mean.defined());  // the info pull carries no frame
  auto result = pull(r, 1, 0, TagKind::kData);
  ASSERT_TRUE(result && result->mean.defined());
  EXPECT_TRUE(at::equal(result->mean, at::full({4}, (1.0f * 1 + 4.0f * 3) / 4)));
  EXPECT_EQ(r.running(), 0u);

  // Collective #1 of both: #0 is dropped once both have asked about #1, and a late pull of
  // #0 is told it is no longer part of it (it keeps its own buffer).
  r.on_push(0, star::tag(1, TagKind::kData), frame_of(2), 1.0, members);
  r.on_push(1, star::tag(1, TagKind::kData), frame_of(2), 1.0, members);
  ASSERT_TRUE(pull(r, 0, 1, TagKind::kInfo));
  ASSERT_TRUE(pull(r, 0, 0, TagKind::kData));  // island 1 has not asked about #1 yet: still kept
  ASSERT_TRUE(pull(r, 1, 1, TagKind::kInfo));
  r.on_membership(members);
  auto late = pull(r, 0, 0, TagKind::kData);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->info.status, StatusCode::kMembershipChanged);
  EXPECT_EQ(late->info.contributors, std::vector<int>{0});
}

TEST(StarReducer, LostMemberIsDroppedAndTheSurvivorsCompleteWithPeerLost) {
  const compression::Pipeline fp32;
  StarReducer r(fp32, 1 << 20);
  r.on_push(0, star::tag(5, TagKind::kData), frame_of(1), 1.0, {0, 1, 2});
  r.on_push(2, star::tag(5, TagKind::kData), frame_of(3), 1.0, {0, 1, 2});
  r.forget(2);  // island 2 died after contributing: its contribution goes too
  r.on_membership({0, 1});
  EXPECT_FALSE(pull(r, 0, 5, TagKind::kInfo));  // still waiting for island 1
  r.on_push(1, star::tag(5, TagKind::kData), frame_of(2), 1.0, {0, 1});
  auto result = pull(r, 1, 5, TagKind::kData);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->info.status, StatusCode::kPeerLost);
  EXPECT_EQ(result->info.contributors, (std::vector<int>{0, 1}));
  EXPECT_TRUE(at::equal(result->mean, at::full({4}, 1.5f)));
}

TEST(StarReducer, JoinerSitsOutCollectivesBeforeItsFirstSeq) {
  const compression::Pipeline fp32;
  StarReducer r(fp32, 1 << 20);
  r.on_push(0, star::tag(3, TagKind::kData), frame_of(7), 2.0, {0, 1});
  EXPECT_FALSE(pull(r, 0, 3, TagKind::kInfo));  // island 1 looks like a member of #3
  r.on_push(1, star::tag(4, TagKind::kFirstSeq), {}, 1.0, {0, 1});  // it starts at #4
  auto alone = pull(r, 0, 3, TagKind::kInfo);
  ASSERT_TRUE(alone);
  EXPECT_EQ(alone->info.status, StatusCode::kOk);
  EXPECT_EQ(alone->info.contributors, std::vector<int>{0});
  EXPECT_DOUBLE_EQ(alone->info.weight_sum, 2.0);
  EXPECT_FALSE(pull(r, 0, 3, TagKind::kData)->mean.defined());  // alone: no frame, it keeps its buffer
  auto not_its = pull(r, 1, 2, TagKind::kInfo);  // a collective before its first seq
  ASSERT_TRUE(not_its);
  EXPECT_EQ(not_its->info.status, StatusCode::kMembershipChanged);
}

TEST(StarReducer, BadContributionFailsTheCollectiveForEveryone) {
  const compression::Pipeline fp32;
  StarReducer r(fp32, 1 << 20);
  r.on_push(0, star::tag(0, TagKind::kData), frame_of(1, 4), 1.0, {0, 1, 2});
  r.on_push(1, star::tag(0, TagKind::kData), frame_of(1, 5), 1.0, {0, 1, 2});  // another size
  for (int id : {0, 1, 2}) {
    auto failed = pull(r, id, 0, TagKind::kInfo);
    ASSERT_TRUE(failed) << id;
    EXPECT_EQ(failed->info.status, StatusCode::kInternal);
  }
  std::vector<uint8_t> garbage = frame_of(1);
  garbage[garbage.size() - 1] ^= 1;  // checksum no longer matches
  r.on_push(0, star::tag(1, TagKind::kData), garbage, 1.0, {0, 1});
  auto corrupt = pull(r, 1, 1, TagKind::kInfo);
  ASSERT_TRUE(corrupt);
  EXPECT_EQ(corrupt->info.status, StatusCode::kCorrupt);
}

}  // namespace
}  // namespace atl::transport
