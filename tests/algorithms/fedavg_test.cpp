// docs/algorithms.md §9 oracles 25–26 (FedAvg), through the real island loop and server role.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "algorithms/algorithm.h"
#include "algorithms/fedavg.h"
#include "compression/frame.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl::algorithms {
namespace {

using atl::testing::run_quadratic;
using atl::testing::sgd_train;

AlgorithmOptions fedavg_options(int k, double fraction, int64_t rounds, int64_t local_steps) {
  FedAvgOptions f;
  f.client_fraction = fraction;
  f.rounds = rounds;
  f.local_steps = local_steps;
  f.outer = {OuterKind::kSgd, 1.0, 0.0};
  AlgorithmOptions o = AlgorithmOptions::of(f);
  o.islands = k;
  o.seed = 11;
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

// The server role alone, driven as a transport drives it (on_time, on_push, on_member_lost),
// with every ServerRound it reports (globals cloned).
struct ServerRun {
  explicit ServerRun(const AlgorithmOptions& o, const at::Tensor& theta0)
      : server(make_server(o, theta0, [this](const ServerRound& r) {
          rounds.push_back(r);
          rounds.back().global = r.global.clone();
        })) {}
  at::Tensor global() { return *server->on_pull(0, 0); }
  std::unique_ptr<transport::OuterServer> server;
  std::vector<ServerRound> rounds;
};

// docs/algorithms.md §7, faults: a selected client the membership loses is dropped from the
// round, which closes with the rest, weights renormalised over the clients that delivered;
// it is never waited for again, and a result it still sends is ignored.
TEST(FedAvg, LostClientIsDroppedAndWeightsRenormaliseOverTheRest) {
  const int64_t n = 7;
  auto o = fedavg_options(4, 1.0, 3, 2);  // all four clients in every round
  at::manual_seed(5);
  const at::Tensor theta0 = at::randn({n});
  std::vector<at::Tensor> d;
  for (int i = 0; i < 4; ++i) d.push_back(at::randn({n}));
  const std::vector<double> w = {10, 20, 30, 40};
  ServerRun s(o, theta0);
  s.server->on_time(0);
  s.server->on_push(0, 0, d[0], w[0]);
  s.server->on_time(1);
  s.server->on_push(2, 0, d[2], w[2]);
  EXPECT_FALSE(s.server->on_member_lost(1, 1.5));  // client 3 is still missing
  EXPECT_TRUE(s.rounds.empty());
  EXPECT_TRUE(s.server->on_member_lost(3, 2.5));  // the last one it waited for
  ASSERT_EQ(s.rounds.size(), 1u);
  const at::Tensor expected = theta0 - (w[0] * d[0] + w[2] * d[2]) / (w[0] + w[2]);
  EXPECT_TRUE(at::allclose(s.rounds[0].global, expected, 1e-6, 1e-6));
  EXPECT_EQ(s.rounds[0].round, 1);
  EXPECT_EQ(s.rounds[0].selected, 4);
  EXPECT_EQ(s.rounds[0].delivered, (std::vector<int>{0, 2}));
  EXPECT_EQ(s.rounds[0].lost, (std::vector<int>{1, 3}));
  EXPECT_TRUE(s.rounds[0].late.empty());
  EXPECT_FALSE(s.rounds[0].skipped);
  EXPECT_EQ(s.rounds[0].at_s, 2.5);  // when the loss was noticed
  EXPECT_EQ(s.server->changed_at(), 2.5);
  // A result a lost client still sends is ignored (a real client declared dead too early).
  s.server->on_time(3);
  s.server->on_push(1, 1, d[1], w[1]);
  // Round 1 waits only for the live clients 0 and 2.
  s.server->on_push(2, 1, d[2], w[2]);
  EXPECT_EQ(s.rounds.size(), 1u);
  s.server->on_push(0, 1, d[0], w[0]);
  ASSERT_EQ(s.rounds.size(), 2u);
  EXPECT_TRUE(at::allclose(s.rounds[1].global, expected - (w[0] * d[0] + w[2] * d[2]) / (w[0] + w[2]), 1e-6, 1e-6));
  EXPECT_EQ(s.rounds[1].at_s, 3);
}

// The server's named state between messages (docs/checkpoints.md "Named state"), with lost
// clients and a result of the open round, loads into a fresh server that then goes on as the
// first: the same entries back, and the same next round. An entry of a client the run does not
// have is refused, naming it.
TEST(FedAvg, ServerStateWithLostClientsAndOpenResultsLoadsIntoAFreshServer) {
  const int64_t n = 5;
  auto o = fedavg_options(4, 1.0, 3, 2);
  at::manual_seed(9);
  const at::Tensor theta0 = at::randn({n});
  std::vector<at::Tensor> d;
  for (int i = 0; i < 4; ++i) d.push_back(at::randn({n}));
  ServerRun a(o, theta0);
  a.server->on_time(0);
  a.server->on_push(0, 0, d[0], 1);
  a.server->on_push(2, 0, d[2], 2);
  a.server->on_member_lost(3, 1.5);
  a.server->on_member_lost(1, 2.5);  // round 0 closes; round 1 waits for 0 and 2
  a.server->on_time(3);
  a.server->on_push(2, 1, d[2], 2);  // a result of the open round
  const transport::OuterServer::State saved = a.server->state();
  EXPECT_EQ(saved.real("lost.1"), 2.5);
  EXPECT_EQ(saved.real("lost.3"), 1.5);
  EXPECT_EQ(saved.real("result.2.weight"), 2.0);
  EXPECT_TRUE(saved.tensor("result.2.delta").equal(d[2]));
  ServerRun b(o, theta0);
  b.server->load(saved);
  const transport::OuterServer::State back = b.server->state();
  ASSERT_EQ(back.entries().size(), saved.entries().size());
  for (size_t i = 0; i < back.entries().size(); ++i) EXPECT_EQ(back.entries()[i].name, saved.entries()[i].name);
  a.server->on_push(0, 1, d[0], 1);
  b.server->on_push(0, 1, d[0], 1);
  ASSERT_EQ(b.rounds.size(), 1u);
  EXPECT_TRUE(at::equal(b.rounds[0].global, a.rounds.back().global));
  EXPECT_EQ(b.rounds[0].round, 2);
  // A lost client 9 of a run of 4.
  transport::OuterServer::State other = saved;
  for (auto& e : other.entries())
    if (e.name == "lost.3") e.name = "lost.9";
  ServerRun c(o, theta0);
  try {
    c.server->load(other);
    ADD_FAILURE() << "a state naming client 9 of 4 loaded";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("no client '9' (entry 'lost.9')"), std::string::npos)
        << e.what_without_backtrace();
  }
}

// A client whose result is not in by the round's deadline (round_timeout_s after the round
// opened) is dropped from it; its later result is ignored, its pull of the closed round gets
// the newest model, and rounds nobody delivers to close empty at their deadlines (skipped).
TEST(FedAvg, DeadlineDropsLateClientsAndEmptyRoundsAreSkipped) {
  const int64_t n = 5;
  auto o = fedavg_options(3, 1.0, 4, 2);
  o.get<FedAvgOptions>().round_timeout_s = 5;
  at::manual_seed(6);
  const at::Tensor theta0 = at::randn({n});
  const at::Tensor d0 = at::randn({n}), d1 = at::randn({n}), d2 = at::randn({n});
  ServerRun s(o, theta0);
  EXPECT_LT(s.server->on_time(0), 0);  // round 0 opens
  s.server->on_time(1);
  s.server->on_push(0, 0, d0, 1);
  s.server->on_time(2);
  s.server->on_push(1, 0, d1, 3);
  EXPECT_LT(s.server->on_time(4.99), 0);
  EXPECT_FALSE(s.server->on_pull(0, 1).has_value());  // round 1 is not open yet
  EXPECT_EQ(s.server->on_time(6), 5);  // closed at its deadline
  ASSERT_EQ(s.rounds.size(), 1u);
  EXPECT_EQ(s.rounds[0].delivered, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.rounds[0].late, (std::vector<int>{2}));
  EXPECT_TRUE(s.rounds[0].lost.empty());
  EXPECT_EQ(s.rounds[0].at_s, 5);
  const at::Tensor after0 = theta0 - (1 * d0 + 3 * d1) / 4;
  EXPECT_TRUE(at::allclose(s.global(), after0, 1e-6, 1e-6));
  // The late client: its result for round 0 is ignored; its pull of round 0 is answered with
  // the newest model (nobody waits for it).
  s.server->on_push(2, 0, d2, 2);
  EXPECT_TRUE(at::equal(s.global(), s.rounds[0].global));
  auto late_pull = s.server->on_pull(2, 0);
  ASSERT_TRUE(late_pull.has_value());
  EXPECT_TRUE(at::equal(*late_pull, s.rounds[0].global));
  // Round 1 opened at 5: nothing arrives; at 17 rounds 1 (deadline 10) and 2 (15) close empty.
  EXPECT_EQ(s.server->on_time(17), 15);
  ASSERT_EQ(s.rounds.size(), 3u);
  for (int r = 1; r <= 2; ++r) {
    EXPECT_TRUE(s.rounds[r].skipped);
    EXPECT_TRUE(s.rounds[r].delivered.empty());
    EXPECT_EQ(s.rounds[r].late, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(s.rounds[r].round, r + 1);
    EXPECT_TRUE(at::equal(s.rounds[r].global, s.rounds[0].global));  // unchanged
  }
  EXPECT_EQ(s.rounds[1].at_s, 10);
  EXPECT_EQ(s.rounds[2].at_s, 15);
  // Round 3 (the last) completes normally before its deadline (20).
  for (int i = 0; i < 3; ++i) s.server->on_push(i, 3, d0, 1);
  ASSERT_EQ(s.rounds.size(), 4u);
  EXPECT_FALSE(s.rounds[3].skipped);
  EXPECT_EQ(s.rounds[3].round, 4);
  EXPECT_LT(s.server->on_time(100), 0);  // no round left to close
}

// algorithm.min_clients: a round with fewer results is skipped (the model is unchanged bitwise
// and the round counter advances); a round every selected client of which is already lost
// closes at once. More than the clients per round is refused.
TEST(FedAvg, RoundWithFewerThanMinClientsResultsIsSkipped) {
  const int64_t n = 6;
  auto o = fedavg_options(3, 1.0, 3, 2);
  o.get<FedAvgOptions>().min_clients = 2;
  at::manual_seed(7);
  const at::Tensor theta0 = at::randn({n});
  ServerRun s(o, theta0);
  s.server->on_time(0);
  s.server->on_push(0, 0, at::randn({n}), 1);
  EXPECT_FALSE(s.server->on_member_lost(1, 1));
  EXPECT_TRUE(s.server->on_member_lost(2, 2));
  // Round 0: one result < 2: skipped. Rounds 1 and 2 wait for client 0 alone.
  ASSERT_EQ(s.rounds.size(), 1u);
  EXPECT_TRUE(s.rounds[0].skipped);
  EXPECT_EQ(s.rounds[0].delivered, (std::vector<int>{0}));
  EXPECT_TRUE(at::equal(s.rounds[0].global, theta0));
  s.server->on_push(0, 1, at::randn({n}), 1);
  ASSERT_EQ(s.rounds.size(), 2u);
  EXPECT_TRUE(s.rounds[1].skipped);
  EXPECT_EQ(s.rounds[1].lost, (std::vector<int>{1, 2}));
  EXPECT_EQ(s.rounds[1].round, 2);
  // The last client lost too: the open round and nothing after it wait for anybody.
  EXPECT_TRUE(s.server->on_member_lost(0, 3));
  ASSERT_EQ(s.rounds.size(), 3u);
  EXPECT_TRUE(s.rounds[2].skipped);
  EXPECT_EQ(s.rounds[2].round, 3);
  EXPECT_TRUE(at::equal(s.global(), theta0));

  EXPECT_FALSE(check_options(o).has_value());  // 2 <= 3 clients per round
  o.get<FedAvgOptions>().client_fraction = 0.5;                     // 1 client per round
  auto problem = check_options(o);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->key, "algorithm.min_clients");
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
  AlgorithmOptions o = AlgorithmOptions::of(FedAvgOptions{});
  o.get<FedAvgOptions>().local_epochs = 5;
  o.batch_size = 10;
  EXPECT_EQ(fedavg::local_steps(o, 600), 300);
  EXPECT_EQ(fedavg::local_steps(o, 605), 305);
  o.get<FedAvgOptions>().local_steps = 7;
  EXPECT_EQ(fedavg::local_steps(o, 600), 7);
}

}  // namespace
}  // namespace atl::algorithms
