// The outer exchange sharded over an island's ranks (transport/shards.h): where the shards of
// a buffer fall, and the simulator's sharded group — its result against a float64 oracle, the
// same bits as one all-reduce per shard issued by hand, and its shards timed as sharing the
// island's links (about the time of one unsharded all-reduce, not 1/S of it).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "transport/inproc/inproc_group.h"
#include "transport/network_model.h"
#include "tests/transport/flat_network.h"
#include "transport/shards.h"

namespace atl::transport {
namespace {

TEST(ShardRanges, CoverTheBufferInAlignedContiguousShards) {
  for (int64_t n : {2 * kShardAlign, 2 * kShardAlign + 1, 11 * kShardAlign - 7, int64_t{842496}, int64_t{1} << 22}) {
    for (int s : {2, 3, 4, 8}) {
      const std::vector<ShardRange> r = shard_ranges(n, s);
      if (n < s * kShardAlign) {
        EXPECT_TRUE(r.empty()) << n << " " << s;
        continue;
      }
      ASSERT_EQ(static_cast<int>(r.size()), s) << n;
      int64_t at = 0, smallest = n, largest = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        EXPECT_EQ(r[i].begin, at) << n << " " << s;
        EXPECT_EQ(r[i].begin % kShardAlign, 0);
        EXPECT_GT(r[i].size, 0);
        at += r[i].size;
        smallest = std::min(smallest, r[i].size);
        largest = std::max(largest, r[i].size);
      }
      EXPECT_EQ(at, n);
      EXPECT_LT(largest - smallest, 2 * kShardAlign) << n << " " << s;  // as even as whole blocks allow
    }
  }
  EXPECT_TRUE(shard_ranges(1 << 20, 1).empty());  // one rank: nothing to shard
}

TEST(ShardKeys, NameTheirShardCountAndNoOtherKeyDoes) {
  for (int s = 0; s < 4; ++s) EXPECT_EQ(shard_streams(shard_key(s, 4)), 4);
  EXPECT_EQ(shard_streams(shard_key(0, 2)), 2);
  EXPECT_EQ(shard_streams(0), 1);
  EXPECT_EQ(shard_streams(7), 1);
  EXPECT_LT(shard_key(255, 255), kShardKeyBase + (1u << 16));
  // A sharded sub-group's shards (DiPaCo's modules): the same count, distinct keys for
  // distinct sub-groups and shards, apart from the island group's.
  std::set<uint32_t> keys;
  for (uint32_t sub : {0u, 1u, 7u, kMaxShardedSubgroup})
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(shard_streams(shard_key(s, 3, sub)), 3);
      EXPECT_TRUE(keys.insert(shard_key(s, 3, sub)).second);
      EXPECT_GE(shard_key(s, 3, sub), kShardKeyBase);
    }
  EXPECT_EQ(shard_key(1, 3, 0), shard_key(1, 3));
  EXPECT_TRUE(sharded_subgroup(1));
  EXPECT_TRUE(sharded_subgroup(kMaxShardedSubgroup));
  EXPECT_FALSE(sharded_subgroup(0));
  EXPECT_FALSE(sharded_subgroup(kMaxShardedSubgroup + 1));
}

CollectiveResult ended(std::vector<int> contributors, StatusCode code = StatusCode::kPeerLost) {
  CollectiveResult r;
  r.status = code == StatusCode::kOk ? Status::ok() : Status(code, "");
  r.contributors = std::move(contributors);
  return r;
}

// Agreement after a failure (real runs): the shards that ended with members the others lack
// run again; a shard that failed outright fails the exchange.
TEST(AgreeShards, RerunsTheShardsThatEndedWithOtherContributors) {
  EXPECT_TRUE(agree_shards({ended({0, 1, 2}, StatusCode::kOk), ended({0, 1, 2}, StatusCode::kOk)}).rerun.empty());
  // Island 2 died after shard 1 completed and before shard 0 did: shard 1 runs again.
  ShardAgreement a = agree_shards({ended({0, 1}), ended({0, 1, 2}, StatusCode::kOk), ended({0, 1})});
  EXPECT_TRUE(a.status.is_ok());
  EXPECT_EQ(a.rerun, (std::vector<int>{1}));
  // Each shard lost a different member: every shard runs again (over the live ones).
  a = agree_shards({ended({0, 2}), ended({0, 1})});
  EXPECT_EQ(a.rerun, (std::vector<int>{0, 1}));
  a = agree_shards({ended({0, 1}), ended({}, StatusCode::kInternal)});
  EXPECT_EQ(a.status.code(), StatusCode::kInternal);
}

struct ShardRun {
  std::vector<at::Tensor> out;
  std::vector<double> end;
};

// k islands all-reduce their buffers once: sharded over `shards` (0: one plain all-reduce;
// -S: S all-reduces of the shards issued by hand on the islands' own groups).
ShardRun sharded_run(int k, int64_t n, int shards, const compression::Pipeline& codec) {
  Scheduler scheduler(k);
  InprocHub hub(k, scheduler);
  NetworkModel model(flat(k, 100, 1));  // bandwidth-bound
  hub.set_network(&model, 1, 2.0);
  std::vector<int> ids;
  for (int i = 0; i < k; ++i) ids.push_back(i);
  std::vector<std::unique_ptr<Group>> groups;
  for (int i = 0; i < k; ++i)
    groups.push_back(shards > 0 ? sharded_group(hub.make_group(i), shards, ids) : hub.make_group(i));
  ShardRun r;
  for (int i = 0; i < k; ++i) r.out.push_back(at::randn({n}, at::TensorOptions().dtype(at::kFloat)) * (i + 1));
  r.end.resize(static_cast<size_t>(k));
  scheduler.run([&](int i) {
    if (shards < 0) {
      std::vector<std::unique_ptr<Handle>> hs;
      for (const ShardRange& s : shard_ranges(n, -shards))
        hs.push_back(groups[static_cast<size_t>(i)]->allreduce_mean(r.out[static_cast<size_t>(i)].narrow(0, s.begin, s.size), codec, 1.0));
      for (auto& h : hs) ASSERT_TRUE(h->wait().status.is_ok());
    } else {
      auto result = groups[static_cast<size_t>(i)]->allreduce_mean(r.out[static_cast<size_t>(i)], codec, 1.0)->wait();
      ASSERT_TRUE(result.status.is_ok());
      EXPECT_EQ(result.contributors, ids);
    }
    r.end[static_cast<size_t>(i)] = scheduler.time(i);
  });
  return r;
}

TEST(ShardedGroup, AllreducesEachShardAsOneAllreduceOfItWouldAndSharesTheLinks) {
  const int k = 3;
  const int64_t n = 96 * kShardAlign + 100;  // 1.5 MB
  const compression::Pipeline lossless;
  at::manual_seed(1);
  const ShardRun plain = sharded_run(k, n, 0, lossless);
  at::manual_seed(1);
  const ShardRun sharded = sharded_run(k, n, 3, lossless);
  at::manual_seed(1);
  const ShardRun by_hand = sharded_run(k, n, -3, lossless);
  // The inputs again, for a float64 oracle of the mean.
  at::manual_seed(1);
  at::Tensor sum = at::zeros({n}, at::kDouble);
  for (int i = 0; i < k; ++i) sum += (at::randn({n}, at::TensorOptions().dtype(at::kFloat)) * (i + 1)).to(at::kDouble);
  const at::Tensor mean = sum / k;
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::allclose(sharded.out[static_cast<size_t>(i)].to(at::kDouble), mean, 1e-6, 1e-6)) << i;
    EXPECT_TRUE(at::equal(sharded.out[static_cast<size_t>(i)], sharded.out[0])) << i;  // every member the same bits
  }
  // Bits: each shard is summed as a ring over that shard alone, not as a part of the whole.
  EXPECT_TRUE(at::equal(sharded.out[0], by_hand.out[0]));
  EXPECT_FALSE(at::equal(sharded.out[0], plain.out[0])) << "the shards were not all-reduced apart";
  // Time: the three shards' messages share the links (about the whole buffer's time); the
  // same three all-reduces issued plainly would each be timed alone, as if on a link of its own.
  const double t_plain = plain.end[0], t_sharded = sharded.end[0], t_apart = by_hand.end[0];
  EXPECT_NEAR(t_sharded, t_plain, 0.05 * t_plain);
  EXPECT_LT(t_apart, 0.5 * t_plain);
}

}  // namespace
}  // namespace atl::transport
