// docs/algorithms.md §9 oracles 8–11 (Streaming DiLoCo), through the real island loop and
// in-process group.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/streaming_diloco.h"
#include "src/base/status.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl::algorithms {
namespace {

using atl::testing::random_targets;
using atl::testing::run_quadratic;
using atl::testing::sgd_by_hand;
using atl::testing::sgd_train;
using streaming_diloco::assign_fragments;
using streaming_diloco::Schedule;

// A GPT-like layout: embedding (10), `blocks` blocks of two tensors (5 + 3), final norm (2)
// and head (10), in buffer order.
std::pair<std::vector<ParamRange>, int64_t> toy_layout(int blocks) {
  std::vector<ParamRange> layout;
  int64_t at = 0;
  auto add = [&](int64_t n, int block) {
    layout.push_back({at, n, block, {}});
    at += n;
  };
  add(10, -1);
  for (int j = 0; j < blocks; ++j) {
    add(5, j);
    add(3, j);
  }
  add(2, -1);
  add(10, -1);
  return {layout, at};
}

AlgorithmOptions streaming(int k, int64_t h, int p, int64_t tau, double alpha) {
  StreamingDilocoOptions s;
  s.inner_steps = h;
  s.fragments = p;
  s.overlap_steps = tau;
  s.mix_alpha = alpha;
  s.outer = {OuterKind::kNesterov, 0.7, 0.9};
  AlgorithmOptions o = AlgorithmOptions::of(s);
  o.islands = k;
  return o;
}

// Owner fragment of every element of [0, n); -1 = none, -2 = more than one.
std::vector<int> owners(const std::vector<std::vector<streaming_diloco::Run>>& fragments, int64_t n) {
  std::vector<int> owner(static_cast<size_t>(n), -1);
  for (size_t p = 0; p < fragments.size(); ++p) {
    for (const auto& r : fragments[p]) {
      for (int64_t e = r.offset; e < r.offset + r.numel; ++e) {
        owner[e] = owner[e] == -1 ? static_cast<int>(p) : -2;
      }
    }
  }
  return owner;
}

// Oracle 8: P = 1, tau = 0, alpha = 0, no quantization -> DiLoCo, bitwise (including the
// final partial round at step 10).
TEST(StreamingDiLoCo, OneFragmentNoOverlapAlphaZeroEqualsDiLoCoBitwise) {
  const int k = 3;
  auto [layout, n] = toy_layout(4);
  auto c = random_targets(k, n);
  at::Tensor theta0 = at::randn({n});
  config::TrainConfig train = sgd_train(0.05, 10);
  train.optimizer = "adamw";
  auto stream = run_quadratic(streaming(k, 4, 1, 0, 0.0), train, c, theta0, {}, nullptr, layout);
  AlgorithmOptions diloco = streaming(k, 4, 1, 0, 0.0);  // the same H and outer optimizer
  DilocoOptions d;
  d.inner_steps = 4;
  d.outer = diloco.get<StreamingDilocoOptions>().outer;
  diloco.name = "diloco";
  diloco.params = d;
  auto reference = run_quadratic(diloco, train, c, theta0);
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::equal(stream.globals[i], reference.globals[i])) << "island " << i;
    EXPECT_TRUE(at::equal(stream.params[i], reference.params[i])) << "island " << i;
    ASSERT_EQ(stream.rounds[i].size(), 3u);
    EXPECT_EQ(stream.rounds[i].back().step, 10);
  }
  EXPECT_FALSE(at::allclose(reference.globals[0], theta0, 1e-3, 1e-3));
}

// Oracle 9: alpha = 1 -> the merge keeps the local values (each island trains as if alone),
// while the anchors still advance: with outer SGD lr 1 they end at the mean of the
// islands' parameters (every fragment is synced after the last step).
// Its anchor and every fragment's outer state held once for islands in step: the same
// global tensor on every island, every number bitwise as without sharing.
TEST(StreamingDiLoCo, IslandsInStepHoldOneGlobalModelBitwiseAsUnshared) {
  auto [layout, n] = toy_layout(4);
  auto c = random_targets(3, n, 5);
  const at::Tensor theta0 = at::randn({n});
  const AlgorithmOptions o = streaming(3, 4, 2, 1, 0.5);
  const auto alone = run_quadratic(o, sgd_train(0.1, 13), c, theta0, {}, nullptr, layout);
  const auto shared = atl::testing::run_quadratic_shared(o, sgd_train(0.1, 13), c, theta0, layout);
  EXPECT_TRUE(shared.one_global);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::equal(shared.run.params[i], alone.params[i]));
    EXPECT_TRUE(at::equal(shared.run.globals[i], alone.globals[i]));
  }
}

TEST(StreamingDiLoCo, AlphaOneKeepsLocalValuesButAnchorsAdvance) {
  const int k = 3, steps = 13;
  auto [layout, n] = toy_layout(4);
  auto c = random_targets(k, n, 3);
  at::Tensor theta0 = at::randn({n});
  AlgorithmOptions o = streaming(k, 4, 2, 1, 1.0);
  o.get<StreamingDilocoOptions>().outer = {OuterKind::kSgd, 1.0, 0.0};
  auto run = run_quadratic(o, sgd_train(0.1, steps), c, theta0, {}, nullptr, layout);
  at::Tensor mean = at::zeros({n});
  for (int i = 0; i < k; ++i) {
    at::Tensor alone = sgd_by_hand(theta0, c[i], 0.1, steps);
    EXPECT_TRUE(at::allclose(run.params[i], alone, 1e-5, 1e-6)) << "island " << i;
    mean += run.params[i];
  }
  mean /= k;
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::equal(run.globals[i], run.globals[0]));
    EXPECT_TRUE(at::allclose(run.globals[i], mean, 1e-5, 1e-6)) << "island " << i;
  }
}

// Oracle 10: H = 100, P = 2 -> offsets {0, 50}; fragment 0 syncs at 100, 200, ...,
// fragment 1 at 150, 250, ...; each fragment's syncs are H apart; at most one in flight.
TEST(StreamingDiLoCo, ScheduleOffsetsAndOneFragmentInFlight) {
  const int64_t h = 100, tau = 5, last = 1000;
  Schedule s(h, 2, tau, last);
  EXPECT_EQ(s.offset(0), 0);
  EXPECT_EQ(s.offset(1), 50);
  std::vector<std::vector<int64_t>> sends(2);
  int in_flight = -1;
  for (int64_t t = 1; t <= last; ++t) {
    const int sent = s.sends_at(t);
    if (sent >= 0) {
      EXPECT_EQ(in_flight, -1) << "step " << t;
      in_flight = sent;
      sends[sent].push_back(t);
    }
    const int received = s.receives_at(t);
    if (received >= 0) {
      EXPECT_EQ(received, in_flight) << "step " << t;
      EXPECT_EQ(s.sends_at(t - tau), received);
      in_flight = -1;
    }
  }
  EXPECT_EQ(in_flight, -1);
  // The send at 1000 would be received after the last step: the final flush covers it.
  EXPECT_EQ(sends[0], (std::vector<int64_t>{100, 200, 300, 400, 500, 600, 700, 800, 900}));
  EXPECT_EQ(sends[1], (std::vector<int64_t>{150, 250, 350, 450, 550, 650, 750, 850, 950}));

  EXPECT_NO_THROW(Schedule(h, 2, 49, last));
  EXPECT_THROW(Schedule(h, 2, 50, last), UserError);    // tau must be < H/P
  EXPECT_NO_THROW(Schedule(h, 3, 32, last));             // offsets 0, 33, 66: gap 33
  EXPECT_THROW(Schedule(h, 3, 33, last), UserError);
  EXPECT_THROW(Schedule(4, 5, 0, last), UserError);      // more fragments than steps
  EXPECT_THROW(make_algorithm(streaming(2, 10, 2, 5, 0.5), 0), UserError);
}

// The schedule as the islands run it: H = 10, P = 2, tau = 1, 45 steps -> fragment syncs
// received at 11, 16, 21, ..., 41, then both fragments flushed at the last step.
TEST(StreamingDiLoCo, RunReceivesOnScheduleAndFlushesAtTheEnd) {
  const int k = 2;
  auto [layout, n] = toy_layout(2);
  auto c = random_targets(k, n);
  auto run = run_quadratic(streaming(k, 10, 2, 1, 0.5), sgd_train(0.05, 45), c, at::zeros({n}), {},
                           nullptr, layout);
  for (int i = 0; i < k; ++i) {
    std::vector<int64_t> steps;
    for (const auto& r : run.rounds[i]) {
      steps.push_back(r.step);
      EXPECT_EQ(r.contributors, k);
      EXPECT_GT(r.bytes_sent, 0u);
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{11, 16, 21, 26, 31, 36, 41, 45, 45}));
    EXPECT_TRUE(at::equal(run.globals[i], run.globals[0]));
  }
}

// Oracle 11: strided puts block j in fragment j mod P, sequential gives contiguous runs of
// blocks; embeddings go to the first fragment, final norm and head to the last; every
// element is in exactly one fragment.
TEST(StreamingDiLoCo, FragmentAssignment) {
  auto [layout, n] = toy_layout(6);
  for (auto mode : {FragmentMode::kStrided, FragmentMode::kSequential}) {
    const auto fragments = assign_fragments(layout, n, 3, mode);
    ASSERT_EQ(fragments.size(), 3u);
    const auto owner = owners(fragments, n);
    for (int64_t e = 0; e < n; ++e) ASSERT_GE(owner[e], 0) << "element " << e;
    for (const auto& r : layout) {
      int expected;
      if (r.block >= 0) {
        expected = mode == FragmentMode::kStrided ? r.block % 3 : r.block / 2;
      } else {
        expected = r.offset == 0 ? 0 : 2;
      }
      for (int64_t e = r.offset; e < r.offset + r.numel; ++e) EXPECT_EQ(owner[e], expected);
    }
  }
  // Adjacent ranges of one fragment are merged: sequential fragment 0 is embedding + blocks 0, 1.
  const auto seq = assign_fragments(layout, n, 3, FragmentMode::kSequential);
  ASSERT_EQ(seq[0].size(), 1u);
  EXPECT_EQ(seq[0][0].numel, 10 + 2 * 8);
  // Uneven: 5 blocks over 2 sequential fragments -> blocks {0, 1} and {2, 3, 4}.
  auto [five, n5] = toy_layout(5);
  const auto owner5 = owners(assign_fragments(five, n5, 2, FragmentMode::kSequential), n5);
  for (const auto& r : five) {
    if (r.block >= 0) {
      EXPECT_EQ(owner5[r.offset], r.block < 2 ? 0 : 1) << "block " << r.block;
    }
  }
  // No layout: one range without blocks, which only one fragment can hold.
  const auto whole = assign_fragments({}, 17, 1, FragmentMode::kStrided);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].size(), 1u);
  EXPECT_EQ(whole[0][0].numel, 17);
  EXPECT_THROW(assign_fragments({}, 17, 2, FragmentMode::kStrided), UserError);
  EXPECT_THROW(assign_fragments(layout, n, 7, FragmentMode::kStrided), UserError);
}

// Lossy codec with error feedback: the replicated anchors stay bitwise identical.
TEST(StreamingDiLoCo, LossyCodecKeepsAnchorsIdentical) {
  const int k = 3;
  auto [layout, n] = toy_layout(4);
  auto c = random_targets(k, n, 5);
  compression::StageConfig st;
  st.id = compression::StageId::kInt4;
  st.block = 16;
  auto int4 = compression::Pipeline::make({st}).value();
  auto run = run_quadratic(streaming(k, 4, 2, 1, 0.5), sgd_train(0.1, 24), c, at::zeros({n}), {},
                           &int4, layout);
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::equal(run.globals[i], run.globals[0]));
    EXPECT_TRUE(at::isfinite(run.globals[i]).all().item<bool>());
  }
  EXPECT_FALSE(at::allclose(run.globals[0], at::zeros({n}), 1e-3, 1e-3));
}

}  // namespace
}  // namespace atl::algorithms
