// The checkpoints of real runs (src/run/process_checkpoint.h): every section round-trips, a
// malformed one is refused, and a whole run resumes from the newest checkpoint that the
// coordinator and every island it lists hold.
#include "src/run/process_checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "src/base/bytes.h"
#include "src/checkpoint/checkpoint_dir.h"

namespace atl::run {
namespace {

namespace fs = std::filesystem;

checkpoint::Checkpoint file_of(const std::vector<checkpoint::Section>& sections) {
  auto c = checkpoint::decode(checkpoint::encode(sections), "test");
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return c.value();
}

IslandProcessCheckpoint island_checkpoint(int island, int64_t step) {
  IslandProcessCheckpoint c;
  c.step = step;
  c.config_hash = "0123456789abcdef";
  c.island = island;
  c.islands = 3;
  c.global = at::arange(6, at::kFloat);
  c.params = at::arange(6, at::kFloat) * 2;
  c.optimizer_steps = step;
  c.optimizer_state = {at::ones({6}), at::Tensor()};
  c.sampler = {2, 17};
  c.algorithm.add("round", int64_t{4}).add("outer.steps", int64_t{3});
  c.algorithm.add("anchor", at::zeros({6})).add("outer.momentum", at::Tensor());
  c.runtime = {step, 1.5, 3};
  c.bytes = {1000, 2000, 4000};
  c.torch_rng = at::arange(8, at::kByte);
  return c;
}

CoordinatorRunState sample_run_state() {
  CoordinatorRunState s;
  s.metrics_bytes = 777;
  s.config_hash = "h";
  s.islands = 3;
  s.snapshot.epoch = 11;
  s.snapshot.members = {{0, 42, "tcp://a:1", ""}, {2, 43, "", "KEY"}};
  s.snapshot.store["atoll/run/start"] = {'s', 't'};
  s.snapshot.store["empty"] = {};
  s.snapshot.records = {{0, 42, 10, {12, 15}}};
  return s;
}

TEST(ProcessCheckpoint, IslandSectionsRoundTrip) {
  const IslandProcessCheckpoint c = island_checkpoint(2, 40);
  auto back = decode_island(file_of(encode_island(c)), "f");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->step, 40);
  EXPECT_EQ(back->island, 2);
  EXPECT_EQ(back->islands, 3);
  EXPECT_EQ(back->config_hash, c.config_hash);
  EXPECT_TRUE(back->global.equal(c.global));
  EXPECT_TRUE(back->params.equal(c.params));
  EXPECT_EQ(back->optimizer_steps, 40);
  ASSERT_EQ(back->optimizer_state.size(), 2u);
  EXPECT_TRUE(back->optimizer_state[0].equal(c.optimizer_state[0]));
  EXPECT_FALSE(back->optimizer_state[1].defined());
  EXPECT_EQ(back->sampler.epoch, 2);
  EXPECT_EQ(back->sampler.pos, 17u);
  ASSERT_EQ(back->algorithm.entries().size(), 4u);
  EXPECT_EQ(back->algorithm.integer("round"), 4);
  EXPECT_EQ(back->algorithm.integer("outer.steps"), 3);
  EXPECT_TRUE(back->algorithm.tensor("anchor").equal(c.algorithm.tensor("anchor")));
  EXPECT_FALSE(back->algorithm.tensor("outer.momentum").defined());
  EXPECT_EQ(back->runtime.steps, 40);
  EXPECT_EQ(back->runtime.loss_acc, 1.5);
  EXPECT_EQ(back->runtime.loss_n, 3);
  EXPECT_EQ(back->bytes.sent, 1000u);
  EXPECT_EQ(back->bytes.received, 2000u);
  EXPECT_EQ(back->bytes.raw_sent, 4000u);
  EXPECT_TRUE(back->torch_rng.equal(c.torch_rng));
  EXPECT_FALSE(back->in_flight) << "no exchange was in flight";

  // With an exchange in flight (diloco with overlap): its result, in section 'inflight'.
  IslandProcessCheckpoint overlap = c;
  overlap.in_flight = transport::CollectiveResult{Status(StatusCode::kPeerLost, "island 1 left"), {0, 2}, 2.5};
  auto flight = decode_island(file_of(encode_island(overlap)), "f");
  ASSERT_TRUE(flight.is_ok()) << flight.status().to_string();
  ASSERT_TRUE(flight->in_flight);
  EXPECT_EQ(flight->in_flight->status.code(), StatusCode::kPeerLost);
  EXPECT_EQ(flight->in_flight->status.message(), "island 1 left");
  EXPECT_EQ(flight->in_flight->contributors, (std::vector<int>{0, 2}));
  EXPECT_EQ(flight->in_flight->weight_sum, 2.5);
  auto torn = encode_island(overlap);
  ASSERT_EQ(torn.back().name, "inflight");
  torn.back().data.pop_back();
  auto torn_back = decode_island(file_of(torn), "f");
  ASSERT_FALSE(torn_back.is_ok());
  EXPECT_EQ(torn_back.status().message(), "f: malformed section 'inflight'");

  // A section cut short (re-sealed, so only the payload is wrong) is refused with one line.
  auto sections = encode_island(c);
  sections.back().data.pop_back();
  auto bad = decode_island(file_of(sections), "f");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "f: malformed section 'island'");
  EXPECT_FALSE(decode_coordinator(file_of(encode_island(c)), "f").is_ok());
}

TEST(ProcessCheckpoint, CoordinatorAndRunStateRoundTrip) {
  CoordinatorCheckpoint c;
  c.step = 50;
  c.metrics_bytes = 12345;
  c.config_hash = "h";
  c.islands = 3;
  c.epoch = 9;
  c.members = {0, 2};
  auto back = decode_coordinator(file_of(encode_coordinator(c)), "f");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->step, 50);
  EXPECT_EQ(back->metrics_bytes, 12345u);
  EXPECT_EQ(back->epoch, 9u);
  EXPECT_EQ(back->members, (std::vector<int>{0, 2}));
  EXPECT_TRUE(back->finished.empty());
  EXPECT_FALSE(back->has_server);

  // fedavg's cut: the islands finished before it and the server role's state.
  CoordinatorCheckpoint fed = c;
  fed.finished = {1};
  fed.has_server = true;
  fed.server_round = 6;
  fed.server.add("round", int64_t{6}).add("outer.steps", int64_t{2}).add_real("now", 0.5);
  fed.server.add("global", at::arange(4, at::kFloat));
  auto fed_back = decode_coordinator(file_of(encode_coordinator(fed)), "f");
  ASSERT_TRUE(fed_back.is_ok()) << fed_back.status().to_string();
  EXPECT_EQ(fed_back->finished, (std::vector<int>{1}));
  ASSERT_TRUE(fed_back->has_server);
  EXPECT_EQ(fed_back->server_round, 6);
  ASSERT_EQ(fed_back->server.entries().size(), 4u);
  EXPECT_EQ(fed_back->server.integer("round"), 6);
  EXPECT_EQ(fed_back->server.integer("outer.steps"), 2);
  EXPECT_EQ(fed_back->server.real("now"), 0.5);
  EXPECT_TRUE(fed_back->server.tensor("global").equal(fed.server.tensor("global")));
  // A file of a build before the finished list: its 'coordinator' section ends after the
  // members, and it reads with none finished.
  auto old = encode_coordinator(c);
  bytes::ByteWriter w;
  w.u64(c.epoch);
  w.i64s({0, 2});
  for (auto& section : old)
    if (section.name == "coordinator") section.data = std::move(w).bytes();
  auto old_back = decode_coordinator(file_of(old), "f");
  ASSERT_TRUE(old_back.is_ok()) << old_back.status().to_string();
  EXPECT_EQ(old_back->members, (std::vector<int>{0, 2}));
  EXPECT_TRUE(old_back->finished.empty());

  const CoordinatorRunState s = sample_run_state();
  auto st = decode_run_state(file_of(encode_run_state(s)), "f");
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  EXPECT_EQ(st->metrics_bytes, 777u);
  EXPECT_EQ(st->snapshot.epoch, 11u);
  ASSERT_EQ(st->snapshot.members.size(), 2u);
  EXPECT_EQ(st->snapshot.members[0].session, 42u);
  EXPECT_EQ(st->snapshot.members[0].endpoint, "tcp://a:1");
  EXPECT_EQ(st->snapshot.members[1].public_key, "KEY");
  EXPECT_EQ(st->snapshot.store, s.snapshot.store);
  ASSERT_EQ(st->snapshot.records.size(), 1u);
  EXPECT_EQ(st->snapshot.records[0].floor, 10u);
  EXPECT_EQ(st->snapshot.records[0].above, (std::vector<uint64_t>{12, 15}));
}

// The coordinator's running state against the layout docs/checkpoints.md documents, written
// here with the cursor's primitives (the layout in process_checkpoint.cpp states it once for
// both directions; this holds it to the bytes earlier builds wrote).
TEST(ProcessCheckpoint, RunStateHoldsTheDocumentedBytes) {
  CoordinatorRunState s = sample_run_state();
  s.snapshot.applied = {{2, 43, {7, 9}}};
  s.snapshot.server_clock_s = 2.5;
  bytes::ByteWriter w;
  const auto& t = s.snapshot;
  w.u64(t.epoch);
  w.u64(t.members.size());
  for (const auto& m : t.members) {
    w.i64(m.id);
    w.u64(m.session);
    w.str(m.endpoint);
    w.str(m.public_key);
  }
  w.u64(t.store.size());
  for (const auto& [key, value] : t.store) {
    w.str(key);
    w.u64(value.size());
    w.raw(value.data(), value.size());
  }
  w.u64(t.records.size());
  for (const auto& r : t.records) {
    w.i64(r.island);
    w.u64(r.session);
    w.u64(r.floor);
    w.i64s({r.above.begin(), r.above.end()});
  }
  w.u64(t.applied.size());
  for (const auto& a : t.applied) {
    w.i64(a.island);
    w.u64(a.session);
    w.i64s({a.ids.begin(), a.ids.end()});
  }
  w.f64(t.server_clock_s);
  bytes::ByteWriter run;
  run.i64(-1);
  run.u64(s.metrics_bytes);
  run.str(s.config_hash);
  run.u64(3);
  const auto sections = encode_run_state(s);
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_EQ(sections[0].name, "run");
  EXPECT_TRUE(sections[0].data == run.bytes());
  EXPECT_EQ(sections[1].name, "coordinator.state");
  EXPECT_TRUE(sections[1].data == w.bytes());
  auto back = decode_run_state(checkpoint::Checkpoint({{"run", run.bytes()}, {"coordinator.state", w.bytes()}}), "f");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->snapshot.applied.size(), 1u);
  EXPECT_EQ(back->snapshot.applied[0].ids, (std::vector<uint64_t>{7, 9}));
  EXPECT_EQ(back->snapshot.server_clock_s, 2.5);
}

TEST(ProcessCheckpoint, ResumesFromTheNewestCommonCheckpoint) {
  auto coord = [](int64_t step, std::vector<int> members) {
    CoordinatorCheckpoint c;
    c.step = step;
    c.members = std::move(members);
    return c;
  };
  const std::vector<CoordinatorCheckpoint> newest_first = {coord(50, {0, 1, 2}), coord(40, {0, 1, 2}), coord(30, {0, 1})};
  std::string why;
  auto p = resume_step(newest_first, {{0, {60, 50, 40}}, {1, {50, 40}}, {2, {50, 40}}}, &why);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 50);
  // Island 1's 50 is torn: back to 40.
  p = resume_step(newest_first, {{0, {50, 40}}, {1, {40}}, {2, {50, 40}}}, &why);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 40);
  // Only 30 is common, and island 2 is not part of it.
  p = resume_step(newest_first, {{0, {30}}, {1, {30}}}, &why);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 30);
  EXPECT_EQ(p->members, (std::vector<int>{0, 1}));
  EXPECT_FALSE(resume_step(newest_first, {{0, {20}}}, &why).has_value());
  EXPECT_NE(why.find("step 50: island(s) 0, 1, 2 hold no usable checkpoint of it"), std::string::npos) << why;
  EXPECT_FALSE(resume_step({}, {}, &why).has_value());
  EXPECT_EQ(why, "the coordinator holds no usable checkpoint");
}

TEST(ProcessCheckpoint, UsableStepsSkipTornFilesAndOtherIslands) {
  const fs::path dir = fs::temp_directory_path() / ("atoll_pc_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  checkpoint::CheckpointDir d(dir.string(), 5);
  for (int64_t s : {10, 20, 30}) ASSERT_TRUE(d.save(s, encode_island(island_checkpoint(1, s))).is_ok());
  ASSERT_TRUE(d.save(40, encode_island(island_checkpoint(2, 40))).is_ok());  // another island's
  const fs::path torn = dir / checkpoint::CheckpointDir::file_name(30);
  fs::resize_file(torn, fs::file_size(torn) - 10);
  std::vector<std::string> refused;
  auto steps = usable_island_steps(dir.string(), "0123456789abcdef", 1, [&](const std::string& l) { refused.push_back(l); });
  EXPECT_EQ(steps, (std::vector<int64_t>{20, 10}));
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_NE(refused[0].find("belongs to island 2"), std::string::npos) << refused[0];
  EXPECT_NE(refused[1].find("truncated"), std::string::npos) << refused[1];
  EXPECT_NE(refused[1].find("; falling back to the previous checkpoint"), std::string::npos) << refused[1];
  EXPECT_TRUE(usable_island_steps(dir.string(), "another", 1, nullptr).empty());
  fs::remove_all(dir);
}

TEST(ProcessCheckpoint, StepLists) {
  EXPECT_EQ(steps_text({50, 40}), "50,40");
  EXPECT_EQ(parse_steps("50,40"), (std::vector<int64_t>{50, 40}));
  EXPECT_TRUE(parse_steps("").empty());
  EXPECT_TRUE(parse_steps("5,,4").empty());
  EXPECT_TRUE(parse_steps("-5").empty());
  EXPECT_TRUE(parse_steps("12345678901234567890").empty());
}

// The step of a checkpoint key, as the coordinator reads marks and a picked-up store.
TEST(ProcessCheckpoint, CheckpointKeysNameTheirStep) {
  EXPECT_EQ(checkpoint_key_step(checkpoint_mark_key(40, 2)), 40);
  EXPECT_EQ(checkpoint_key_step(checkpoint_done_key(7)), 7);
  EXPECT_EQ(checkpoint_key_step(kCheckpointAskKey), -1);
  EXPECT_EQ(checkpoint_key_step("atoll/checkpoint/x/done"), -1);
  EXPECT_EQ(checkpoint_key_step("atoll/checkpoint/40"), -1);
  EXPECT_EQ(checkpoint_key_step("other/checkpoint/40/done"), -1);
}

}  // namespace
}  // namespace atl::run
