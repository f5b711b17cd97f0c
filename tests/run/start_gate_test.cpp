// When a real run starts, decided from what the coordinator knows (src/run/start_gate.h):
// every island, or min_islands at the join timeout or when the rest were refused; and the
// one line naming the missing islands.
#include "src/run/start_gate.h"
#include "src/run/data_plane.h"
#include "transport/kinds.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "transport/zmq/curve.h"

namespace atl::run {
namespace {

JoinView view(int islands, int min, std::vector<int> joined) {
  JoinView v;
  v.islands = islands;
  v.min_islands = min;
  v.join_timeout_s = 120;
  v.joined = std::move(joined);
  return v;
}

TEST(StartGate, StartsAtOnceWhenEveryIslandJoined) {
  auto d = decide_start(view(3, 3, {2, 0, 1}));
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->start);
  EXPECT_EQ(d->islands, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(d->why, "");
}

TEST(StartGate, WaitsUntilTheTimeoutThenStartsWithMinIslands) {
  JoinView v = view(3, 2, {0, 1});
  EXPECT_FALSE(decide_start(v)) << "island 2 may still come";
  v.timed_out = true;
  auto d = decide_start(v);
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->start);
  EXPECT_EQ(d->islands, (std::vector<int>{0, 1}));
  EXPECT_EQ(d->why, "starting with 2 of 3 islands (transport.min_islands 2); missing: island 2 (never connected)");
}

TEST(StartGate, DoesNotWaitForRefusedIslands) {
  JoinView v = view(3, 2, {0, 1});
  v.refused[2] = "CURVE key refused: k/island-2.pub is not in k/allowed/";
  auto d = decide_start(v);
  ASSERT_TRUE(d) << "every missing island was refused: nothing to wait for";
  EXPECT_TRUE(d->start);
  EXPECT_EQ(d->islands, (std::vector<int>{0, 1}));
  EXPECT_NE(d->why.find("island 2 (CURVE key refused: k/island-2.pub is not in k/allowed/)"), std::string::npos) << d->why;

  // With every island required, a refused one fails the run at once.
  v.min_islands = 3;
  d = decide_start(v);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->start);
  EXPECT_EQ(d->why, "2 of 3 islands joined and the others cannot, fewer than transport.min_islands 3; missing: "
                    "island 2 (CURVE key refused: k/island-2.pub is not in k/allowed/)");
}

TEST(StartGate, FailsAtTheTimeoutNamingEveryMissingIslandAndWhy) {
  JoinView v = view(4, 3, {0});
  v.left = {3};
  v.refused[1] = "CURVE key refused: x";
  EXPECT_FALSE(decide_start(v)) << "islands 2 and 3 may still come: 3 possible";
  v.timed_out = true;
  auto d = decide_start(v);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->start);
  EXPECT_EQ(d->why, "only 1 of 4 islands joined within transport.join_timeout_s (120 s), fewer than "
                    "transport.min_islands 3; missing: island 1 (CURVE key refused: x), island 2 (never "
                    "connected), island 3 (joined, then left or died before the start)");
  // Fewer than min_islands can still come: fail before the timeout.
  JoinView w = view(3, 3, {0});
  w.refused[1] = "r";
  ASSERT_TRUE(decide_start(w));
  EXPECT_FALSE(decide_start(w)->start);
}

TEST(StartGate, DoesNotWaitForIslandsWhoseProcessEndedBeforeJoining) {
  JoinView v = view(3, 2, {0, 1});
  v.gone[2] = "signal 9";
  auto d = decide_start(v);
  ASSERT_TRUE(d) << "island 2's process is gone: nothing to wait for";
  EXPECT_TRUE(d->start);
  EXPECT_EQ(d->islands, (std::vector<int>{0, 1}));
  EXPECT_EQ(d->why, "starting with 2 of 3 islands (transport.min_islands 2); missing: island 2 (its process ended with "
                    "signal 9 before it joined)");
  v.min_islands = 3;
  d = decide_start(v);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->start);
  EXPECT_EQ(d->why, "2 of 3 islands joined and the others cannot, fewer than transport.min_islands 3; missing: island 2 "
                    "(its process ended with signal 9 before it joined)");
  // A refusal is the more precise reason when both are known.
  v.refused[2] = "CURVE key refused: x";
  EXPECT_NE(decide_start(v)->why.find("island 2 (CURVE key refused: x)"), std::string::npos);
}

TEST(StartGate, StillExpectedAreTheMissingIslandsThatMayJoin) {
  JoinView v = view(5, 5, {3, 0});
  v.refused[1] = "r";
  v.gone[4] = "exit code 1";
  EXPECT_EQ(still_expected(v), (std::vector<int>{2}));
  // Failing is certain (at most 3 of 5 can come), but island 2 may still join: the coordinator
  // waits for it before it announces the line (src/run/coordinator_process.cpp).
  auto d = decide_start(v);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->start);
  v.joined.push_back(2);
  EXPECT_TRUE(still_expected(v).empty());
  EXPECT_EQ(decide_start(v)->why, "3 of 5 islands joined and the others cannot, fewer than transport.min_islands 5; "
                                  "missing: island 1 (r), island 4 (its process ended with exit code 1 before it joined)");
}

TEST(StartGate, ExitReportsReadBackAndOtherLinesAreNot) {
  const std::string line = encode_exit_report({2, "signal 9"});
  EXPECT_EQ(line, "exited 2 signal 9");
  auto r = parse_exit_report(line);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->island, 2);
  EXPECT_EQ(r->how, "signal 9");
  for (const std::string bad : {"", "exited", "exited 2", "exited x signal 9", "exited -1 signal 9", "exited  signal",
                                "exited 99999999 exit code 1", "joined 2 ok"}) {
    EXPECT_FALSE(parse_exit_report(bad)) << bad;
  }
}

TEST(StartGate, DecisionsReadBackAndGarbageIsRefused) {
  StartDecision go;
  go.start = true;
  go.islands = {0, 2, 11};
  const auto bytes = encode_start(go);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "start:0,2,11");
  auto back = parse_start(bytes);
  ASSERT_TRUE(back.is_ok());
  EXPECT_TRUE(back->start);
  EXPECT_EQ(back->islands, go.islands);
  StartDecision fail;
  fail.why = "only 1 of 3 islands joined";
  back = parse_start(encode_start(fail));
  ASSERT_TRUE(back.is_ok());
  EXPECT_FALSE(back->start);
  EXPECT_EQ(back->why, fail.why);
  for (const std::string bad : {"", "go", "start:", "start:1,,2", "start:a", "start:1,", "start:99999999"}) {
    EXPECT_EQ(parse_start(std::vector<uint8_t>(bad.begin(), bad.end())).status().code(), StatusCode::kCorrupt) << bad;
  }
}

TEST(StartGate, RefusedKeysAreTracedToTheIslandKeyFiles) {
  if (!transport::curve::available().is_ok()) GTEST_SKIP() << "no CURVE";
  const auto dir = std::filesystem::temp_directory_path() / ("atoll_start_gate_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string keys = dir.string();
  const auto k0 = transport::curve::generate_keypair(keys, "island-0").value();
  const auto k2 = transport::curve::generate_keypair(keys, "island-2").value();
  const auto stranger = transport::curve::generate_keypair(keys, "someone").value();
  auto refused = refused_islands(keys, 3, {k2.public_key, stranger.public_key});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused.at(2), "CURVE key refused: " + keys + "/island-2.pub is not in " + keys + "/allowed/");
  EXPECT_TRUE(refused_islands(keys, 3, {}).empty());
  EXPECT_EQ(refused_islands(keys, 3, {k0.public_key}).count(0), 1u);
  std::filesystem::remove_all(dir);
}

// The transport registry's two halves agree: every kind the config accepts
// (transport/kinds.h) has its data plane row (src/run/data_plane.cpp), in the same order, and
// a kind without a row is one clear error.
TEST(TransportRegistry, EveryKindHasItsDataPlaneRow) {
  EXPECT_EQ(data_plane_kinds(), transport::transport_kind_names());
  config::TransportConfig t;
  t.kind = "carrier-pigeon";
  EXPECT_EQ(transport::find_transport_kind(t.kind), nullptr);
}

}  // namespace
}  // namespace atl::run
