// The Group conformance suite: every Group implementation (in-process, ZeroMQ, gloo) runs the
// same checks against independent oracles computed here in float64 from the inputs (a dense
// mean, the root's buffer, every member's bytes), not against another implementation:
// all-reduce (uniform and weighted, lossless and lossy), broadcast, allgather, sub-groups
// reducing concurrently, and a member lost before a collective. Islands are threads (the
// in-process hub's run under its cooperative scheduler).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
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

class GroupConformance : public ::testing::TestWithParam<std::string> {
 protected:
  bool has_subgroups() const { return GetParam() == "inproc"; }
};

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
  if (!has_subgroups()) GTEST_SKIP() << "sub-groups are not available over " << GetParam() << " yet";
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

INSTANTIATE_TEST_SUITE_P(Transports, GroupConformance, ::testing::Values("inproc", "zmq", "gloo"),
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

}  // namespace
}  // namespace atl::transport::testing
