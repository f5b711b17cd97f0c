// The Group conformance suite: every Group implementation (in-process, ZeroMQ, gloo) runs the
// same checks against independent oracles computed here in float64 from the inputs (a dense
// mean, the root's buffer, every member's bytes), not against another implementation:
// all-reduce (uniform and weighted, lossless and lossy), broadcast, allgather, sub-groups
// (overlapping and disjoint) running their collectives concurrently, a member lost before a
// collective, and (ZeroMQ, gloo) a member that dies in the middle of a collective of the
// whole group or of a sub-group. Islands are threads (the in-process hub's run under its
// cooperative scheduler).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/transport/gloo_cluster.h"
#include "tests/transport/zmq_group_test_util.h"
#include "transport/inproc/inproc_group.h"

namespace atl::transport::testing {
namespace {

// W islands of one transport.
class Cluster {
 public:
  virtual ~Cluster() = default;
  virtual int size() const = 0;
  virtual Group& group(int i) = 0;
  // Runs body(i) for every island; joins them; rethrows the first exception.
  virtual void run(const std::function<void(int)>& body) = 0;
};

class InprocCluster final : public Cluster {
 public:
  explicit InprocCluster(int w) : scheduler_(w), hub_(w, scheduler_) {
    for (int i = 0; i < w; ++i) groups_.push_back(hub_.make_group(i));
  }
  int size() const override { return static_cast<int>(groups_.size()); }
  Group& group(int i) override { return *groups_[static_cast<size_t>(i)]; }
  void run(const std::function<void(int)>& body) override { scheduler_.run(body); }
  InprocHub& hub() { return hub_; }

 private:
  Scheduler scheduler_;
  InprocHub hub_;
  std::vector<std::unique_ptr<Group>> groups_;
};

template <typename C>
class NetCluster final : public Cluster {
 public:
  explicit NetCluster(int w) : c_(w) {}
  int size() const override { return c_.size(); }
  Group& group(int i) override { return *c_.groups[static_cast<size_t>(i)]; }
  void run(const std::function<void(int)>& body) override { c_.run(body); }

 private:
  C c_;
};

std::unique_ptr<Cluster> make_cluster(const std::string& kind, int w) {
  if (kind == "inproc") return std::make_unique<InprocCluster>(w);
  if (kind == "zmq") return std::make_unique<NetCluster<ZmqCluster>>(w);
  return std::make_unique<NetCluster<GlooCluster>>(w);
}

// sum_i w_i x_i / sum_i w_i, in float64.
at::Tensor dense_mean(const std::vector<at::Tensor>& xs, const std::vector<double>& ws) {
  at::Tensor sum = at::zeros_like(xs[0], at::kDouble);
  double wsum = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    sum += xs[i].to(at::kDouble) * ws[i];
    wsum += ws[i];
  }
  return sum / wsum;
}

// Largest |got - want| over the elements.
double max_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).abs().max().item<double>();
}

class GroupConformance : public ::testing::TestWithParam<std::string> {};

// Bytes of island i's contribution to an allgather: n + i bytes (a pattern of i).
std::vector<uint8_t> bytes_of(int i, size_t n) {
  std::vector<uint8_t> b(n + static_cast<size_t>(i));
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(k * 7 + i);
  return b;
}

bool in(const std::vector<int>& ids, int i) { return std::find(ids.begin(), ids.end(), i) != ids.end(); }

// Lossless: every member ends bitwise equal, within a few fp32 roundings of the float64 mean.
TEST_P(GroupConformance, AllreduceMeanIsTheDenseMean) {
  auto c = make_cluster(GetParam(), 3);
  const std::vector<at::Tensor> in = random_inputs(3, 10007, 11);
  std::vector<at::Tensor> buf = clones(in);
  std::vector<CollectiveResult> r(3);
  c->run([&](int i) { r[i] = c->group(i).allreduce_mean(buf[i], compression::Pipeline(), 1.0)->wait(in_seconds(30)); });
  const at::Tensor want = dense_mean(in, {1, 1, 1});
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
    EXPECT_EQ(r[i].contributors, (std::vector<int>{0, 1, 2}));
    EXPECT_TRUE(at::equal(buf[i], buf[0])) << "island " << i;
    // Two fp32 additions and a division: a few ulp of values of order 1-10.
    EXPECT_LT(max_error(buf[i], want), 1e-5) << "island " << i;
  }
}

TEST_P(GroupConformance, WeightedMeanIsTheDenseWeightedMean) {
  auto c = make_cluster(GetParam(), 3);
  const std::vector<at::Tensor> in = random_inputs(3, 5003, 12);
  const std::vector<double> w = {1.0, 2.5, 4.0};
  std::vector<at::Tensor> buf = clones(in);
  std::vector<CollectiveResult> r(3);
  c->run([&](int i) { r[i] = c->group(i).allreduce_mean(buf[i], compression::Pipeline(), w[i])->wait(in_seconds(30)); });
  const at::Tensor want = dense_mean(in, w);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
    EXPECT_DOUBLE_EQ(r[i].weight_sum, 7.5);
    EXPECT_TRUE(at::equal(buf[i], buf[0])) << "island " << i;
    EXPECT_LT(max_error(buf[i], want), 1e-5) << "island " << i;
  }
}

// Lossy (int8, blocks of 64): members agree bitwise, within two quantisations of the mean
// (each at most one step of its block: max |x| / 127 for the contributions, and the mean's
// own block for the result).
TEST_P(GroupConformance, LossyAllreduceIsWithinTwoQuantisationsOfTheDenseMean) {
  auto c = make_cluster(GetParam(), 3);
  const compression::Pipeline int8 = make_pipeline(compression::StageId::kInt8);
  const std::vector<at::Tensor> in = random_inputs(3, 4096, 13);
  std::vector<at::Tensor> buf = clones(in);
  c->run([&](int i) {
    CollectiveResult r = c->group(i).allreduce_mean(buf[i], int8, 1.0)->wait(in_seconds(30));
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  });
  const at::Tensor want = dense_mean(in, {1, 1, 1});
  double step = 0;
  for (const auto& x : in) step = std::max(step, x.abs().max().item<double>() / 127);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::equal(buf[i], buf[0])) << "island " << i;
    EXPECT_LT(max_error(buf[i], want), 2 * step) << "island " << i;
    EXPECT_GT(max_error(buf[i], want), 0) << "a lossy codec that changed nothing";
  }
}

TEST_P(GroupConformance, BroadcastDeliversTheRootsBuffer) {
  auto c = make_cluster(GetParam(), 3);
  const std::vector<at::Tensor> in = random_inputs(3, 3001, 14);
  std::vector<at::Tensor> buf = clones(in);
  c->run([&](int i) {
    CollectiveResult r = c->group(i).broadcast(2, buf[i], compression::Pipeline())->wait(in_seconds(30));
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  });
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(buf[i], in[2])) << "island " << i;
}

// Bytes of different lengths (one member sends none): everyone gets everyone's, by id.
TEST_P(GroupConformance, AllgatherCollectsEveryMembersBytes) {
  auto c = make_cluster(GetParam(), 4);
  auto bytes_of = [](int i) {
    std::vector<uint8_t> b(static_cast<size_t>(i == 2 ? 0 : 1000 * i + 7));
    for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(k * 31 + i);
    return b;
  };
  std::vector<std::vector<std::vector<uint8_t>>> out(4);
  std::vector<CollectiveResult> r(4);
  c->run([&](int i) { r[i] = c->group(i).allgather(bytes_of(i), &out[i])->wait(in_seconds(30)); });
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
    ASSERT_EQ(r[i].contributors, (std::vector<int>{0, 1, 2, 3}));
    ASSERT_EQ(out[i].size(), 4u);
    for (int q = 0; q < 4; ++q) EXPECT_EQ(out[i][q], bytes_of(q)) << "island " << i << " from " << q;
  }
}

// Sub-groups {0, 1} and {1, 2, 3} all-reduce among themselves, both in flight with an
// all-reduce of every island: each result is the dense mean over its own members.
TEST_P(GroupConformance, SubgroupsReduceAmongTheirMembersConcurrently) {
  auto c = make_cluster(GetParam(), 4);
  const std::vector<std::vector<int>> subs = {{0, 1}, {1, 2, 3}};
  const std::vector<at::Tensor> all_in = random_inputs(4, 2000, 15);
  std::vector<std::vector<at::Tensor>> sub_in = {random_inputs(4, 3000, 16), random_inputs(4, 1000, 17)};
  std::vector<at::Tensor> all_buf = clones(all_in);
  std::vector<std::vector<at::Tensor>> sub_buf = {clones(sub_in[0]), clones(sub_in[1])};
  c->run([&](int i) {
    std::vector<std::unique_ptr<Group>> groups;
    std::vector<std::unique_ptr<Handle>> handles;
    for (size_t s = 0; s < subs.size(); ++s) {
      const auto& ids = subs[s];
      if (std::find(ids.begin(), ids.end(), i) == ids.end()) continue;
      groups.push_back(c->group(i).subgroup(static_cast<uint32_t>(s + 1), ids));
      EXPECT_EQ(groups.back()->view().members, ids);
      handles.push_back(groups.back()->allreduce_mean(sub_buf[s][i], compression::Pipeline(), 1.0));
    }
    handles.push_back(c->group(i).allreduce_mean(all_buf[i], compression::Pipeline(), 1.0));
    for (auto& h : handles) {
      CollectiveResult r = h->wait(in_seconds(30));
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    }
  });
  const at::Tensor want_all = dense_mean(all_in, {1, 1, 1, 1});
  for (int i = 0; i < 4; ++i) EXPECT_LT(max_error(all_buf[i], want_all), 1e-5) << "island " << i;
  for (size_t s = 0; s < subs.size(); ++s) {
    std::vector<at::Tensor> members_in;
    for (int i : subs[s]) members_in.push_back(sub_in[s][i]);
    const at::Tensor want = dense_mean(members_in, std::vector<double>(members_in.size(), 1.0));
    for (int i = 0; i < 4; ++i) {
      const bool member = std::find(subs[s].begin(), subs[s].end(), i) != subs[s].end();
      if (member) {
        EXPECT_LT(max_error(sub_buf[s][i], want), 1e-5) << "sub-group " << s << " island " << i;
      } else {
        EXPECT_TRUE(at::equal(sub_buf[s][i], sub_in[s][i])) << "sub-group " << s << " touched island " << i;
      }
    }
  }
}

// Disjoint sub-groups {0, 1} and {2, 3} each broadcast, allgather and all-reduce (weighted)
// among themselves while every island gathers; half the islands issue the whole group's
// collective first, the others last (groups are matched on their own, not in issue order).
TEST_P(GroupConformance, DisjointSubgroupsBroadcastGatherAndReduce) {
  auto c = make_cluster(GetParam(), 4);
  const std::vector<std::vector<int>> subs = {{0, 1}, {2, 3}};
  const std::vector<at::Tensor> bc_in = random_inputs(4, 777, 21), ar_in = random_inputs(4, 1500, 22);
  std::vector<at::Tensor> bc = clones(bc_in), ar = clones(ar_in);
  std::vector<std::vector<std::vector<uint8_t>>> sub_out(4), all_out(4);
  c->run([&](int i) {
    const std::vector<int>& ids = subs[static_cast<size_t>(i / 2)];
    std::unique_ptr<Group> sub = c->group(i).subgroup(static_cast<uint32_t>(10 + i / 2), ids);
    EXPECT_EQ(sub->view().members, ids);
    std::vector<std::unique_ptr<Handle>> handles;
    auto gather_all = [&] { handles.push_back(c->group(i).allgather({static_cast<uint8_t>(i)}, &all_out[i])); };
    if (i % 2 == 0) gather_all();
    handles.push_back(sub->broadcast(ids[1], bc[i], compression::Pipeline()));
    handles.push_back(sub->allgather(bytes_of(i, 300), &sub_out[i]));
    handles.push_back(sub->allreduce_mean(ar[i], compression::Pipeline(), 1.0 + i));
    if (i % 2 == 1) gather_all();
    for (auto& h : handles) {
      CollectiveResult r = h->wait(in_seconds(30));
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    }
  });
  for (int i = 0; i < 4; ++i) {
    const std::vector<int>& ids = subs[static_cast<size_t>(i / 2)];
    EXPECT_TRUE(at::equal(bc[i], bc_in[ids[1]])) << "island " << i;
    EXPECT_EQ(sub_out[i], (std::vector<std::vector<uint8_t>>{bytes_of(ids[0], 300), bytes_of(ids[1], 300)}));
    const at::Tensor want = dense_mean({ar_in[ids[0]], ar_in[ids[1]]}, {1.0 + ids[0], 1.0 + ids[1]});
    EXPECT_LT(max_error(ar[i], want), 1e-5) << "island " << i;
    EXPECT_TRUE(at::equal(ar[i], ar[ids[0]])) << "island " << i;
    EXPECT_EQ(all_out[i], (std::vector<std::vector<uint8_t>>{{0}, {1}, {2}, {3}})) << "island " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, GroupConformance, ::testing::Values("inproc", "zmq", "gloo"),
                         [](const auto& info) { return info.param; });

// Island 2 dies in the middle of an allgather of large strings in sub-group {0, 1, 2} while
// sub-group {1, 3} all-reduces (its group and sub-group are destroyed: their connections
// close, as a killed process's do); the survivors' membership drops it. Sub-group {0, 1, 2}'s
// survivors end with the same contributors and strings (the two of them after a restart, or
// all three when one had finished and hands its result over), then gather between
// themselves; sub-group {1, 3} is unaffected: ok, both contributors, the dense mean.
template <typename C, typename Options>
void subgroup_member_dies_midway(Options o, size_t n) {
  C c(4, o, /*static_planes=*/false);
  const std::vector<int> a_ids = {0, 1, 2}, b_ids = {1, 3};
  const std::vector<at::Tensor> b_in = random_inputs(4, 1000, 23);
  std::vector<at::Tensor> b_buf = clones(b_in);
  std::vector<std::vector<std::vector<uint8_t>>> out(4), again(4);
  std::vector<CollectiveResult> ra(4), rb(4), rq(4);
  c.run([&](int i) {
    std::unique_ptr<Group> a, b;
    std::unique_ptr<Handle> ha, hb;
    if (in(a_ids, i)) {
      a = c.groups[i]->subgroup(1, a_ids);
      ha = a->allgather(bytes_of(i, n), &out[i]);
    }
    if (in(b_ids, i)) {
      b = c.groups[i]->subgroup(2, b_ids);
      hb = b->allreduce_mean(b_buf[i], compression::Pipeline(), 1.0);
    }
    if (i == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      a.reset();
      c.groups[2].reset();  // dies mid-way
      const Membership survivors{1, {c.peers[0], c.peers[1], c.peers[3]}};
      for (int j : {0, 1, 3}) c.test_planes[j]->set(survivors);
      return;
    }
    if (hb) rb[i] = hb->wait(in_seconds(60));
    if (!ha) return;
    ra[i] = ha->wait(in_seconds(60));
    // As islands do, each survivor goes on once it has its result (a finished member hands it
    // to one that restarted when asked) and sees island 2 gone.
    const Clock::time_point until = Clock::now() + std::chrono::seconds(30);
    while (a->view().members != std::vector<int>{0, 1} && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    rq[i] = a->allgather(bytes_of(i, 10), &again[i])->wait(in_seconds(60));
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ra[i].status.is_ok() || ra[i].status.code() == StatusCode::kPeerLost) << ra[i].status.to_string();
    ASSERT_GE(ra[i].contributors.size(), 2u);
    ASSERT_EQ(out[i].size(), ra[i].contributors.size());
    for (size_t k = 0; k < out[i].size(); ++k) EXPECT_TRUE(out[i][k] == bytes_of(ra[i].contributors[k], n)) << k;
    if (ra[i].contributors.size() == 2) {
      EXPECT_EQ(ra[i].status.code(), StatusCode::kPeerLost);
    }
    EXPECT_TRUE(rq[i].status.is_ok()) << rq[i].status.to_string();
    EXPECT_EQ(rq[i].contributors, (std::vector<int>{0, 1}));
    EXPECT_EQ(again[i], (std::vector<std::vector<uint8_t>>{bytes_of(0, 10), bytes_of(1, 10)}));
  }
  EXPECT_EQ(ra[0].contributors, ra[1].contributors);
  EXPECT_EQ(ra[0].status.code(), ra[1].status.code());
  EXPECT_TRUE(out[0] == out[1]);
  const at::Tensor want = dense_mean({b_in[1], b_in[3]}, {1, 1});
  for (int i : b_ids) {
    EXPECT_TRUE(rb[i].status.is_ok()) << rb[i].status.to_string();
    EXPECT_EQ(rb[i].contributors, b_ids);
    EXPECT_LT(max_error(b_buf[i], want), 1e-5) << "island " << i;
    EXPECT_TRUE(at::equal(b_buf[i], b_buf[1])) << "island " << i;
  }
  ::testing::Test::RecordProperty("contributors", static_cast<int>(ra[0].contributors.size()));
}

class SubgroupMemberDies : public ::testing::TestWithParam<std::string> {};

TEST_P(SubgroupMemberDies, SurvivorsOfTheSubgroupAgreeAndOthersAreUnaffected) {
  if (GetParam() == "zmq") {
    ZmqGroupOptions o;  // slow links: small chunks, one credit
    o.poll_ms = 10;
    o.chunk_bytes = 64 << 10;
    o.max_in_flight = 1;
    o.linger_ms = 0;  // a destroyed group stops at once
    subgroup_member_dies_midway<ZmqCluster>(o, size_t{4} << 20);
  } else {
    GlooGroupOptions o;
    o.chunk_bytes = 64 << 10;
    o.poll_ms = 20;
    o.connect_timeout_ms = 2000;
    subgroup_member_dies_midway<GlooCluster>(o, size_t{16} << 20);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, SubgroupMemberDies, ::testing::Values("zmq", "gloo"),
                         [](const auto& info) { return info.param; });

// A member lost before it posts: the survivors' allgather and all-reduce complete with the
// survivors alone (in-process: InprocHub::remove_member, as the simulator's kill events).
TEST(GroupConformanceInproc, SurvivorsCompleteWithoutALostMember) {
  InprocCluster c(3);
  const std::vector<at::Tensor> in = random_inputs(3, 1000, 18);
  std::vector<at::Tensor> buf = clones(in);
  std::vector<std::vector<std::vector<uint8_t>>> out(3);
  c.run([&](int i) {
    if (i == 2) {
      c.hub().remove_member(2, 0.0);
      return;
    }
    CollectiveResult g = c.group(i).allgather({static_cast<uint8_t>(i)}, &out[i])->wait();
    EXPECT_EQ(g.contributors, (std::vector<int>{0, 1}));
    EXPECT_EQ(out[i], (std::vector<std::vector<uint8_t>>{{0}, {1}}));
    CollectiveResult r = c.group(i).allreduce_mean(buf[i], compression::Pipeline(), 1.0)->wait();
    EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
  });
  const at::Tensor want = dense_mean({in[0], in[1]}, {1, 1});
  for (int i = 0; i < 2; ++i) EXPECT_LT(max_error(buf[i], want), 1e-5);
}

// ZeroMQ: island 2 dies in the middle of an allgather of large byte strings (slow links:
// small chunks, one credit); the coordinator's new epoch drops it. The survivors end with
// the same contributors and bytes (the two of them after a restart, or all three when one
// had finished and hands its result over), each string that of its contributor.
TEST(GroupConformanceZmq, AllgatherSurvivorsAgreeWhenAMemberDiesMidway) {
  ZmqGroupOptions o;
  o.poll_ms = 10;
  o.chunk_bytes = 64 << 10;
  o.max_in_flight = 1;
  o.linger_ms = 0;  // a destroyed group stops at once
  ZmqCluster c(3, o, /*static_planes=*/false);
  const size_t n = size_t{4} << 20;
  std::vector<std::vector<std::vector<uint8_t>>> out(3);
  std::vector<std::unique_ptr<Handle>> handles;
  for (int i = 0; i < 3; ++i) handles.push_back(c.groups[i]->allgather(bytes_of(i, n), &out[i]));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c.groups[2].reset();  // dies mid-way
  const Membership survivors{1, {c.peers[0], c.peers[1]}};
  for (int i = 0; i < 2; ++i) c.test_planes[i]->set(survivors);
  std::vector<CollectiveResult> r(2);
  for (int i = 0; i < 2; ++i) r[i] = handles[i]->wait(in_seconds(60));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(r[i].status.is_ok() || r[i].status.code() == StatusCode::kPeerLost) << r[i].status.to_string();
    ASSERT_GE(r[i].contributors.size(), 2u);
    ASSERT_EQ(out[i].size(), r[i].contributors.size());
    for (size_t k = 0; k < out[i].size(); ++k) EXPECT_EQ(out[i][k], bytes_of(r[i].contributors[k], n));
  }
  EXPECT_EQ(r[0].contributors, r[1].contributors);
  EXPECT_EQ(out[0], out[1]);
  RecordProperty("contributors", static_cast<int>(r[0].contributors.size()));
}

}  // namespace
}  // namespace atl::transport::testing
