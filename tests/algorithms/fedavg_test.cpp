// docs/algorithms.md §9 oracles 25–26 (FedAvg), through the real island loop and server role.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "algorithms/fedavg.h"
#include "compression/frame.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl::algorithms {
namespace {

using atl::testing::run_quadratic;
using atl::testing::sgd_train;

AlgorithmOptions fedavg_options(int k, double fraction, int64_t rounds, int64_t local_steps) {
  AlgorithmOptions o;
  o.name = "fedavg";
  o.islands = k;
  o.seed = 11;
  o.client_fraction = fraction;
  o.rounds = rounds;
  o.local_steps = local_steps;
  o.outer = {OuterKind::kSgd, 1.0, 0.0};
  return o;
}

// Oracle 25: E = 1, B = inf (one local step on the whole shard), C = 1 -> one step of
// full-batch gradient descent on the n_k-weighted objective per round.
TEST(FedAvg, FedSgdIsFullBatchGdOnWeightedObjective) {
  const int k = 4;
  const int64_t n = 25, rounds = 6;
  const std::vector<int64_t> sizes = {10, 20, 30, 40};
  at::manual_seed(3);
  std::vector<at::Tensor> c;
  for (int i = 0; i < k; ++i) c.push_back(at::randn({n}));
  at::Tensor theta0 = at::randn({n});
  const double lr = 0.3;
  auto run = run_quadratic(fedavg_options(k, 1.0, rounds, 1), sgd_train(lr, 1), c, theta0, sizes);

  at::Tensor w = theta0.clone();
  for (int t = 0; t < rounds; ++t) {
    at::Tensor g = at::zeros({n});
    for (int i = 0; i < k; ++i) g += (sizes[i] / 100.0) * (w - c[i]);
    w = w - lr * g;
  }
  ASSERT_TRUE(run.server_global.defined());
  EXPECT_TRUE(at::allclose(run.server_global, w, 1e-5, 1e-6));
  for (int i = 0; i < k; ++i) EXPECT_EQ(static_cast<int64_t>(run.rounds[i].size()), rounds);
}

// Oracle 26: weights are normalised over the selected clients only.
TEST(FedAvg, WeightsNormaliseOverSelectedClients) {
  const int k = 6;
  const int64_t n = 9;
  const std::vector<int64_t> sizes = {5, 10, 15, 20, 25, 30};
  at::manual_seed(4);
  std::vector<at::Tensor> c;
  for (int i = 0; i < k; ++i) c.push_back(at::randn({n}));
  at::Tensor theta0 = at::zeros({n});
  const double lr = 0.5;
  auto opts = fedavg_options(k, 0.5, 1, 2);
  auto run = run_quadratic(opts, sgd_train(lr, 2), c, theta0, sizes);

  const auto chosen = fedavg::select_clients(opts.seed, 0, k, 3);
  ASSERT_EQ(chosen.size(), 3u);
  double m_t = 0;
  for (int i : chosen) m_t += static_cast<double>(sizes[i]);
  at::Tensor expected = at::zeros({n});
  for (int i : chosen) {
    at::Tensor w = theta0.clone();
    for (int s = 0; s < 2; ++s) w = w - lr * (w - c[i]);
    expected += (sizes[i] / m_t) * w;
  }
  EXPECT_TRUE(at::allclose(run.server_global, expected, 1e-5, 1e-6));
  // unselected clients did no work and sent nothing
  for (int i = 0; i < k; ++i) {
    const bool selected = std::find(chosen.begin(), chosen.end(), i) != chosen.end();
    EXPECT_EQ(run.bytes[i].sent > 0, selected) << "client " << i;
    const uint64_t frame = n * 4u + compression::kMinFrameHeaderBytes;
    EXPECT_EQ(run.bytes[i].sent, selected ? frame : 0u);
    EXPECT_EQ(run.bytes[i].received, selected ? frame : 0u);
  }
}

TEST(FedAvg, ClientSelectionIsSeededSampleWithoutReplacement) {
  EXPECT_EQ(fedavg::clients_per_round(0.1, 100), 10);
  EXPECT_EQ(fedavg::clients_per_round(0.01, 10), 1);
  EXPECT_EQ(fedavg::clients_per_round(1.0, 7), 7);
  std::set<std::vector<int>> distinct;
  for (int64_t t = 0; t < 20; ++t) {
    auto s = fedavg::select_clients(5, t, 100, 10);
    EXPECT_EQ(s, fedavg::select_clients(5, t, 100, 10));
    EXPECT_EQ(std::set<int>(s.begin(), s.end()).size(), 10u);
    for (int i : s) EXPECT_TRUE(i >= 0 && i < 100);
    distinct.insert(s);
  }
  EXPECT_GT(distinct.size(), 15u);
  EXPECT_NE(fedavg::select_clients(5, 0, 100, 10), fedavg::select_clients(6, 0, 100, 10));
}

TEST(FedAvg, LocalEpochsGiveStepsPerShard) {
  AlgorithmOptions o;
  o.local_epochs = 5;
  o.batch_size = 10;
  EXPECT_EQ(fedavg::local_steps(o, 600), 300);
  EXPECT_EQ(fedavg::local_steps(o, 605), 305);
  o.local_steps = 7;
  EXPECT_EQ(fedavg::local_steps(o, 600), 7);
}

}  // namespace
}  // namespace atl::algorithms
