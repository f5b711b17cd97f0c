// src/core/sim_checkpoint.h: the simulator's sections round-trip exactly (tensors of every
// stored dtype, undefined ones, the hub, the accounting), and malformed sections are refused
// with one line naming the section.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "src/core/sim_checkpoint.h"

namespace atl::core {
namespace {

SimCheckpoint sample() {
  torch::manual_seed(1);
  SimCheckpoint c;
  c.step = 40;
  c.metrics_bytes = 12345;
  c.config_hash = "0123456789abcdef";
  c.global = torch::randn({10});
  c.hub.members = {0, 2};
  c.hub.epoch = 3;
  c.hub.counters = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}};
  c.hub.waits = {{0.5, 0.25}, {1, 2}, {3, 4}};
  c.hub.first_seq = {0, 0, 7};
  c.hub.next_seq = {9, 9, 9};
  c.hub.sub_next_seq[{5, 1}] = 11;
  c.hub.sub_first_seq[{5, 2}] = 4;
  c.hub.joiners = {2};
  c.hub.detected_at = 1.5;
  c.hub.last_push_arrival = -0.0;
  c.hub.rng = "1 2 3";
  transport::InprocHub::Settled settled;  // an all-reduce in flight (section "inflight")
  settled.key = 2;
  settled.seq = 8;
  settled.ids = {0, 2};
  settled.result = {Status(StatusCode::kPeerLost, "island 1 lost"), {0, 2}, 2.5};
  settled.start = 3.25;
  settled.done_at = 4.5;
  settled.holders = {{0, 3.0}, {2, 3.25}};
  c.hub.settled = {settled};
  c.cost_model = "3 0 1 0 2 0 3";
  c.progress = {120, 300, 2.5, -1, 10, 999};
  c.evals.steps = {0, 7, 14};
  c.evals.last_step = 14;
  c.evals.last_loss = 3.25;
  c.evals.best_loss = 3.0;
  c.target_time = NAN;
  c.target_step = -1;
  c.torch_rng = torch::randint(0, 255, {16}, torch::kByte);
  c.has_server = true;  // a server role (section "server")
  c.server_time = 7.75;
  c.server_round = 5;
  c.server.counters = {5, 4, 2};
  c.server.reals = {NAN, 7.75, 7.5, 9.0};
  c.server.tensors = {torch::randn({10}), at::Tensor(), torch::randn({10})};
  for (int i = 0; i < 2; ++i) {
    IslandCheckpoint is;
    is.params = torch::randn({10});
    is.optimizer_steps = 40 + i;
    is.optimizer_state = {torch::randn({10}), at::Tensor()};
    is.sampler = {2, 17};
    is.algorithm.counters = {10, 10};
    is.algorithm.tensors = {torch::randn({2, 5}, torch::kDouble), at::Tensor(), torch::arange(3)};
    is.runtime = {40, 1.5, 1};
    is.time_s = 4.0 + i;
    is.end_time_s = 0.125;
    is.rounds = 10;
    is.planned = true;
    is.finished = i == 1;
    c.islands.push_back(is);
  }
  return c;
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && torch::equal(a, b));
}

TEST(SimCheckpoint, RoundTripsExactly) {
  const SimCheckpoint c = sample();
  const checkpoint::Checkpoint file(encode_sim_checkpoint(c));
  StatusOr<SimCheckpoint> back = decode_sim_checkpoint(file, "f");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  const SimCheckpoint& d = *back;
  EXPECT_EQ(d.step, 40);
  EXPECT_EQ(d.metrics_bytes, 12345u);
  EXPECT_EQ(d.config_hash, c.config_hash);
  EXPECT_TRUE(same(d.global, c.global));
  EXPECT_EQ(d.hub.members, c.hub.members);
  EXPECT_EQ(d.hub.epoch, 3u);
  ASSERT_EQ(d.hub.counters.size(), 3u);
  EXPECT_EQ(d.hub.counters[1].received, 5u);
  EXPECT_EQ(d.hub.waits[0].idle_s, 0.25);
  EXPECT_EQ(d.hub.first_seq, c.hub.first_seq);
  EXPECT_EQ(d.hub.next_seq, c.hub.next_seq);
  EXPECT_EQ(d.hub.sub_next_seq, c.hub.sub_next_seq);
  EXPECT_EQ(d.hub.sub_first_seq, c.hub.sub_first_seq);
  EXPECT_EQ(d.hub.joiners, c.hub.joiners);
  EXPECT_EQ(d.hub.detected_at, 1.5);
  EXPECT_TRUE(std::signbit(d.hub.last_push_arrival));
  EXPECT_EQ(d.hub.rng, "1 2 3");
  ASSERT_EQ(d.hub.settled.size(), 1u);
  const auto& st = d.hub.settled[0];
  EXPECT_EQ(st.key, 2u);
  EXPECT_EQ(st.seq, 8u);
  EXPECT_EQ(st.kind, 0);
  EXPECT_EQ(st.root, -1);
  EXPECT_EQ(st.ids, (std::vector<int>{0, 2}));
  EXPECT_EQ(st.result.status.code(), StatusCode::kPeerLost);
  EXPECT_EQ(st.result.status.message(), "island 1 lost");
  EXPECT_EQ(st.result.contributors, (std::vector<int>{0, 2}));
  EXPECT_EQ(st.result.weight_sum, 2.5);
  EXPECT_EQ(st.start, 3.25);
  EXPECT_EQ(st.done_at, 4.5);
  EXPECT_EQ(st.holders, c.hub.settled[0].holders);
  // Nothing in flight: no "inflight" section at all.
  SimCheckpoint quiet = c;
  quiet.hub.settled.clear();
  const checkpoint::Checkpoint quiet_file(encode_sim_checkpoint(quiet));
  EXPECT_EQ(quiet_file.find("inflight"), nullptr);
  StatusOr<SimCheckpoint> quiet_back = decode_sim_checkpoint(quiet_file, "f");
  ASSERT_TRUE(quiet_back.is_ok());
  EXPECT_TRUE(quiet_back->hub.settled.empty());
  EXPECT_EQ(d.cost_model, c.cost_model);
  EXPECT_EQ(d.progress.steps_done, 120);
  EXPECT_EQ(d.progress.bytes, 999u);
  EXPECT_EQ(d.evals.steps, c.evals.steps);
  EXPECT_EQ(d.evals.best_loss, 3.0);
  EXPECT_TRUE(std::isnan(d.target_time));
  EXPECT_TRUE(same(d.torch_rng, c.torch_rng));
  ASSERT_EQ(d.islands.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const IslandCheckpoint &a = c.islands[i], &b = d.islands[i];
    EXPECT_TRUE(same(a.params, b.params));
    EXPECT_EQ(b.optimizer_steps, a.optimizer_steps);
    ASSERT_EQ(b.optimizer_state.size(), 2u);
    EXPECT_TRUE(same(a.optimizer_state[0], b.optimizer_state[0]));
    EXPECT_FALSE(b.optimizer_state[1].defined());
    EXPECT_EQ(b.sampler.epoch, 2);
    EXPECT_EQ(b.sampler.pos, 17u);
    EXPECT_EQ(b.algorithm.counters, a.algorithm.counters);
    ASSERT_EQ(b.algorithm.tensors.size(), 3u);
    for (size_t t = 0; t < 3; ++t) EXPECT_TRUE(same(a.algorithm.tensors[t], b.algorithm.tensors[t])) << t;
    EXPECT_EQ(b.runtime.loss_acc, 1.5);
    EXPECT_EQ(b.time_s, a.time_s);
    EXPECT_EQ(b.end_time_s, 0.125);
    EXPECT_EQ(b.finished, a.finished);
    EXPECT_TRUE(b.planned);
  }
  ASSERT_TRUE(d.has_server);
  EXPECT_EQ(d.server_time, 7.75);
  EXPECT_EQ(d.server_round, 5);
  EXPECT_EQ(d.server.counters, c.server.counters);
  ASSERT_EQ(d.server.reals.size(), 4u);
  EXPECT_TRUE(std::isnan(d.server.reals[0]));
  EXPECT_EQ(d.server.reals[3], 9.0);
  ASSERT_EQ(d.server.tensors.size(), 3u);
  for (size_t t = 0; t < 3; ++t) EXPECT_TRUE(same(c.server.tensors[t], d.server.tensors[t])) << t;
  // Without a server role: no "server" section.
  SimCheckpoint serverless = c;
  serverless.has_server = false;
  const checkpoint::Checkpoint serverless_file(encode_sim_checkpoint(serverless));
  EXPECT_EQ(serverless_file.find("server"), nullptr);
  EXPECT_FALSE(decode_sim_checkpoint(serverless_file, "f")->has_server);
  // Export reads the global model alone.
  StatusOr<SimCheckpoint> g = decode_global(file, "f");
  ASSERT_TRUE(g.is_ok());
  EXPECT_TRUE(same(g->global, c.global));
}

TEST(SimCheckpoint, MalformedSectionsAreRefusedWithOneLine) {
  auto sections = encode_sim_checkpoint(sample());
  auto refused = [](std::vector<checkpoint::Section> s, const std::string& why) {
    StatusOr<SimCheckpoint> d = decode_sim_checkpoint(checkpoint::Checkpoint(std::move(s)), "checkpoint 'f'");
    ASSERT_FALSE(d.is_ok()) << why;
    EXPECT_EQ(d.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(d.status().message().find(why), std::string::npos) << d.status().message();
    EXPECT_EQ(d.status().message().find('\n'), std::string::npos);
  };
  auto without = [&](const std::string& name) {
    auto s = sections;
    s.erase(std::remove_if(s.begin(), s.end(), [&](const auto& x) { return x.name == name; }), s.end());
    return s;
  };
  refused(without("run"), "not a simulator checkpoint");
  refused(without("simulator"), "no section 'simulator'");
  refused(without("island.1"), "no section 'island.1'");
  for (const char* name : {"run", "global", "simulator", "island.0", "inflight", "server"}) {
    auto s = sections;
    for (auto& x : s)
      if (x.name == name) x.data.resize(x.data.size() - 3);
    refused(s, std::string("malformed section '") + name + "'");
    s = sections;
    for (auto& x : s)
      if (x.name == name) x.data += "x";
    refused(s, std::string("malformed section '") + name + "'");
  }
}

}  // namespace
}  // namespace atl::core
