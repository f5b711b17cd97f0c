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
  c.server.add("round", int64_t{5}).add_real("open_at", NAN).add("global", torch::randn({10}));
  c.server.add("outer.steps", int64_t{4}).add("outer.momentum", at::Tensor()).add_real("lost.2", 7.5);
  c.server.add_real("result.0.weight", 9.0).add("result.0.delta", torch::randn({10}));
  for (int i = 0; i < 2; ++i) {
    IslandCheckpoint is;
    is.params = torch::randn({10});
    is.optimizer_steps = 40 + i;
    is.optimizer_state = {torch::randn({10}), at::Tensor()};
    is.sampler = {2, 17};
    is.algorithm.add("round", int64_t{10}).add("outer.steps", int64_t{10});
    is.algorithm.add("anchor", torch::randn({2, 5}, torch::kDouble)).add("outer.momentum", at::Tensor());
    is.algorithm.add("ids", torch::arange(3)).add_real("pushed_at", -0.5);
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

// The same entries in the same order (NaN reals equal to NaN).
bool same_state(const NamedState& a, const NamedState& b) {
  if (a.entries().size() != b.entries().size()) return false;
  for (size_t i = 0; i < a.entries().size(); ++i) {
    const NamedState::Entry &x = a.entries()[i], &y = b.entries()[i];
    const bool reals = x.real == y.real || (std::isnan(x.real) && std::isnan(y.real));
    if (x.name != y.name || x.kind != y.kind || x.integer != y.integer || !reals || !same(x.tensor, y.tensor))
      return false;
  }
  return true;
}

// Named state as docs/checkpoints.md "Named state" documents it, written field by field: u64
// entry count; per entry str name, u8 kind (1 integer, 2 real, 3 tensor), the value.
void named_state(bytes::ByteWriter& w, const NamedState& s) {
  w.u64(s.entries().size());
  for (const NamedState::Entry& e : s.entries()) {
    w.str(e.name);
    if (e.kind == NamedState::Kind::kInteger) {
      w.u8(1);
      w.i64(e.integer);
    } else if (e.kind == NamedState::Kind::kReal) {
      w.u8(2);
      w.f64(e.real);
    } else {
      w.u8(3);
      put_tensor(w, e.tensor);
    }
  }
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
    EXPECT_TRUE(same_state(a.algorithm, b.algorithm));
    EXPECT_EQ(b.runtime.loss_acc, 1.5);
    EXPECT_EQ(b.time_s, a.time_s);
    EXPECT_EQ(b.end_time_s, 0.125);
    EXPECT_EQ(b.finished, a.finished);
    EXPECT_TRUE(b.planned);
  }
  ASSERT_TRUE(d.has_server);
  EXPECT_EQ(d.server_time, 7.75);
  EXPECT_EQ(d.server_round, 5);
  EXPECT_TRUE(same_state(c.server, d.server));
  EXPECT_TRUE(std::isnan(d.server.real("open_at")));
  EXPECT_EQ(d.server.real("result.0.weight"), 9.0);
  EXPECT_EQ(d.server.integer("outer.steps"), 4);
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

// The bytes of every section, against the layout docs/checkpoints.md "Simulator sections"
// documents, written here field by field with the cursor's primitives: the layouts in
// src/core/sim_checkpoint.* state it once for both directions, and this oracle holds them to
// the bytes that checkpoints of earlier builds contain (so those still load).
TEST(SimCheckpoint, SectionsHoldTheDocumentedBytes) {
  SimCheckpoint c = sample();
  EvalResult path_result;
  path_result.loss = 3.5;
  path_result.count = 40;
  path_result.path = 1;
  path_result.paths = 2;
  path_result.sequences = 6;
  path_result.train_sequences = 9;
  c.evals.path_results = {{7, path_result}};
  c.kills_fired = {0, 3};
  c.islands[1].params = at::Tensor();  // a dead island
  c.islands[1].alive = false;
  c.islands[1].optimizer_state.clear();
  std::map<std::string, std::string> expected;
  auto i64s = [](bytes::ByteWriter& w, const auto& v) {
    w.u64(v.size());
    for (auto x : v) w.i64(static_cast<int64_t>(x));
  };
  {
    bytes::ByteWriter w;
    w.i64(c.step);
    w.u64(c.metrics_bytes);
    w.str(c.config_hash);
    w.u64(c.islands.size());
    expected["run"] = std::move(w).bytes();
  }
  {
    bytes::ByteWriter w;
    put_tensor(w, c.global);
    expected["global"] = std::move(w).bytes();
  }
  {
    bytes::ByteWriter w;
    const auto& h = c.hub;
    i64s(w, h.members);
    w.u64(h.epoch);
    w.u64(h.counters.size());
    for (const auto& x : h.counters) {
      w.u64(x.sent);
      w.u64(x.received);
      w.u64(x.raw_sent);
    }
    w.u64(h.waits.size());
    for (const auto& x : h.waits) {
      w.f64(x.comm_s);
      w.f64(x.idle_s);
    }
    i64s(w, h.first_seq);
    i64s(w, h.next_seq);
    for (const auto* m : {&h.sub_next_seq, &h.sub_first_seq}) {
      w.u64(m->size());
      for (const auto& [k, v] : *m) {
        w.u32(k.first);
        w.i64(k.second);
        w.u64(v);
      }
    }
    i64s(w, h.joiners);
    w.f64(h.detected_at);
    w.f64(h.last_push_arrival);
    w.str(h.rng);
    w.str(c.cost_model);
    const auto& p = c.progress;
    w.i64(p.steps_done);
    w.i64(p.steps_total);
    w.f64(p.last_loss);
    w.f64(p.val_loss);
    w.i64(p.rounds);
    w.u64(p.bytes);
    i64s(w, c.evals.steps);
    w.i64(c.evals.last_step);
    w.f64(c.evals.last_loss);
    w.f64(c.evals.last_accuracy);
    w.f64(c.evals.best_loss);
    w.f64(c.target_time);
    w.f64(c.target_bytes);
    w.i64(c.target_step);
    put_tensor(w, c.torch_rng);
    expected["simulator"] = std::move(w).bytes();
  }
  auto result = [&](bytes::ByteWriter& w, const transport::CollectiveResult& r) {
    w.u8(static_cast<uint8_t>(r.status.code()));
    w.str(r.status.message());
    i64s(w, r.contributors);
    w.f64(r.weight_sum);
  };
  {
    bytes::ByteWriter w;
    w.u64(c.hub.settled.size());
    for (const auto& x : c.hub.settled) {
      w.u32(x.key);
      w.u64(x.seq);
      w.u8(x.kind);
      w.i64(x.root);
      i64s(w, x.ids);
      result(w, x.result);
      w.f64(x.start);
      w.f64(x.done_at);
      w.u64(x.holders.size());
      for (const auto& [island, at] : x.holders) {
        w.i64(island);
        w.f64(at);
      }
    }
    expected["inflight"] = std::move(w).bytes();
  }
  {
    bytes::ByteWriter w;
    i64s(w, c.kills_fired);
    expected["events"] = std::move(w).bytes();
  }
  {
    bytes::ByteWriter w;
    w.f64(c.server_time);
    w.i64(c.server_round);
    named_state(w, c.server);
    expected["server"] = std::move(w).bytes();
  }
  {
    bytes::ByteWriter w;
    w.u64(c.evals.path_results.size());
    for (const auto& [step, r] : c.evals.path_results) {
      w.i64(step);
      w.i64(r.path);
      w.i64(r.paths);
      w.f64(r.loss);
      w.i64(r.count);
      w.i64(r.sequences);
      w.i64(r.train_sequences);
    }
    expected["path_evals"] = std::move(w).bytes();
  }
  for (size_t i = 0; i < c.islands.size(); ++i) {
    const IslandCheckpoint& is = c.islands[i];
    bytes::ByteWriter w;
    put_tensor(w, is.params);
    w.i64(is.optimizer_steps);
    put_tensors(w, is.optimizer_state);
    w.i64(is.sampler.epoch);
    w.u64(is.sampler.pos);
    named_state(w, is.algorithm);
    w.i64(is.runtime.steps);
    w.f64(is.runtime.loss_acc);
    w.i64(is.runtime.loss_n);
    for (double d : {is.time_s, is.compute_s, is.slept_s, is.last_compute_s, is.last_comm_s, is.last_waited_s,
                     is.last_slept_s, is.member_since_s, is.member_s, is.end_time_s})
      w.f64(d);
    w.i64(is.rounds);
    w.u8(is.planned);
    w.u8(is.alive);
    w.u8(is.finished);
    expected["island." + std::to_string(i)] = std::move(w).bytes();
  }
  const auto sections = encode_sim_checkpoint(c);
  ASSERT_EQ(sections.size(), expected.size());
  for (const auto& s : sections) {
    ASSERT_EQ(expected.count(s.name), 1u) << s.name;
    EXPECT_TRUE(s.data == expected[s.name]) << "section '" << s.name << "' differs from the documented layout";
  }
  // And the documented bytes read back.
  std::vector<checkpoint::Section> documented;
  for (const auto& [name, payload] : expected) documented.push_back({name, payload});
  const checkpoint::Checkpoint file(std::move(documented));
  auto back = decode_sim_checkpoint(file, "oracle");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->islands.size(), 2u);
  EXPECT_FALSE(back->islands[1].alive);
  EXPECT_EQ(back->kills_fired, c.kills_fired);
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
