// CoordinatorState without sockets: the coordinator's rules as functions of (message, time).
#include <gtest/gtest.h>

#include "transport/zmq/coordinator_state.h"
#include "tests/transport/zmq_test_util.h"

namespace atl::transport::testing {
namespace {

using proto::Message;
using proto::MsgType;

class StateTest : public ::testing::Test {
 protected:
  StateTest() : server_(1) {
    options_.heartbeat_ms = 100;
    options_.heartbeat_timeout_ms = 1000;
    options_.server = &server_;
  }

  // Feeds one message from island `id` (session `session`) at t0 + `at_ms`; returns the
  // parsed messages sent back to that island's connection.
  std::vector<Message> feed(Message m, int id, uint64_t session, int64_t at_ms, uint64_t rid = 0) {
    m.header.island = id;
    m.header.session = session;
    m.header.request_id = rid;
    wire_.push_back(proto::encode_or_throw(m));  // keeps `bytes` views alive
    Message parsed;
    EXPECT_TRUE(proto::parse(wire_.back().data(), wire_.back().size(), &parsed).is_ok());
    std::vector<Outgoing> out;
    state_.on_message("conn-" + std::to_string(id), "", parsed, t0_ + milliseconds(at_ms), &out);
    return replies(out, id);
  }
  std::vector<Message> tick(int64_t at_ms, int to = 0) {
    std::vector<Outgoing> out;
    state_.on_tick(t0_ + milliseconds(at_ms), &out);
    return replies(out, to);
  }
  std::vector<Message> replies(const std::vector<Outgoing>& out, int id) {
    std::vector<Message> got;
    for (const Outgoing& o : out) {
      if (o.routing_id != "conn-" + std::to_string(id)) continue;
      wire_.push_back(o.bytes);
      got.emplace_back();
      EXPECT_TRUE(proto::parse(wire_.back().data(), wire_.back().size(), &got.back()).is_ok());
    }
    return got;
  }
  static Message of(MsgType type) {
    Message m;
    m.header.type = type;
    return m;
  }
  Message push(uint64_t tag, float value) {
    Message m = of(MsgType::kPush);
    m.tag = tag;
    frames_.push_back(encode_tensor(compression::Pipeline(), torch::full({2}, value)));
    m.bytes = frames_.back();
    return m;
  }

  MeanServer server_;
  CoordinatorOptions options_;
  CoordinatorState state_{options_};
  Clock::time_point t0_ = Clock::now();
  std::deque<std::vector<uint8_t>> wire_, frames_;
};

TEST_F(StateTest, ResentPushIsAppliedOnceEvenAfterARejoin) {
  ASSERT_EQ(feed(of(MsgType::kJoin), 0, 7, 0).at(0).header.type, MsgType::kJoinAck);
  EXPECT_EQ(feed(push(1, 2.f), 0, 7, 10, /*rid=*/5).at(0).header.type, MsgType::kAck);
  EXPECT_EQ(feed(push(1, 2.f), 0, 7, 20, 5).at(0).header.type, MsgType::kAck);  // resent
  EXPECT_EQ(server_.pushers().size(), 1u);
  tick(2000);  // silent: declared dead
  EXPECT_TRUE(state_.membership().members.empty());
  std::vector<Message> r = feed(push(1, 2.f), 0, 7, 2010, 5);
  EXPECT_EQ(r.at(0).error, proto::ErrorCode::kUnknownIsland);
  feed(of(MsgType::kJoin), 0, 7, 2020);  // same session joins again and resends
  EXPECT_EQ(feed(push(1, 2.f), 0, 7, 2030, 5).at(0).header.type, MsgType::kAck);
  EXPECT_EQ(server_.pushers().size(), 1u);
  EXPECT_EQ(feed(push(1, 2.f), 0, 7, 2040, 6).at(0).header.type, MsgType::kAck);  // a new one
  EXPECT_EQ(server_.pushers().size(), 2u);
}

TEST_F(StateTest, EpochsFollowChangesAndNeverGoBack) {
  Message join = of(MsgType::kJoin);
  join.header.epoch = 41;  // an island that saw epoch 41 of a previous coordinator
  EXPECT_EQ(feed(join, 0, 1, 0).at(0).membership.epoch, 42u);
  EXPECT_EQ(feed(of(MsgType::kJoin), 1, 2, 0).at(0).membership.epoch, 43u);
  EXPECT_EQ(feed(of(MsgType::kJoin), 1, 2, 0).at(0).membership.epoch, 43u);  // resent JOIN: no change
  // Island 0 heartbeats with its stale view: it gets the membership again.
  Message hb = of(MsgType::kHeartbeat);
  hb.header.epoch = 42;
  std::vector<Message> r = feed(hb, 0, 1, 50);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.type, MsgType::kMembership);
  EXPECT_EQ(ids(r[0].membership), (std::vector<int>{0, 1}));
  hb.header.epoch = 43;
  EXPECT_TRUE(feed(hb, 0, 1, 60).empty());
  // A new process as island 1: new epoch, the old session is told it is superseded.
  feed(of(MsgType::kJoin), 1, 3, 70);
  EXPECT_EQ(state_.epoch(), 44u);
  EXPECT_EQ(feed(of(MsgType::kHeartbeat), 1, 2, 80).at(0).error, proto::ErrorCode::kSuperseded);
}

// A run the coordinator ends (Coordinator::end_run: a stop policy failed it): every live
// island is told at once, unasked; an island that heartbeats or joins after is told too; a
// LEAVE still leaves.
TEST_F(StateTest, AnEndedRunIsToldToEveryIslandAndEveryLaterJoin) {
  feed(of(MsgType::kJoin), 0, 1, 0);
  feed(of(MsgType::kJoin), 1, 2, 0);
  std::vector<Outgoing> out;
  state_.end_run("the run failed: checkpoint of step 10 not written", &out);
  for (int id : {0, 1}) {
    const std::vector<Message> told = replies(out, id);
    ASSERT_EQ(told.size(), 1u) << id;
    EXPECT_EQ(told[0].header.type, MsgType::kError);
    EXPECT_EQ(told[0].error, proto::ErrorCode::kRunEnded);
    EXPECT_EQ(told[0].header.request_id, 0u);
    EXPECT_EQ(told[0].text, "the run failed: checkpoint of step 10 not written");
  }
  out.clear();
  state_.end_run("again", &out);  // told once
  EXPECT_TRUE(out.empty());
  std::vector<Message> r = feed(of(MsgType::kHeartbeat), 0, 1, 50);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].error, proto::ErrorCode::kRunEnded);
  r = feed(of(MsgType::kJoin), 2, 3, 60, /*rid=*/4);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].error, proto::ErrorCode::kRunEnded);
  EXPECT_EQ(r[0].header.request_id, 4u);
  EXPECT_EQ(ids(state_.membership()), (std::vector<int>{0, 1}));
  feed(of(MsgType::kLeave), 0, 1, 70);
  EXPECT_EQ(ids(state_.membership()), (std::vector<int>{1}));
}

// An island that joined without a data endpoint (it waits for a state hand-over) publishes
// one with a JOIN of the same session: a new epoch, and its waiting STORE_GET stays.
TEST_F(StateTest, JoinOfTheLiveSessionWithAnEndpointPublishesIt) {
  EXPECT_EQ(feed(of(MsgType::kJoin), 0, 1, 0).at(0).membership.epoch, 1u);
  Message get = of(MsgType::kStoreGet);
  get.key = "handover";
  get.wait_ms = 5000;
  EXPECT_TRUE(feed(get, 0, 1, 10, /*rid=*/7).empty());  // waits
  Message publish = of(MsgType::kJoin);
  publish.endpoint = "tcp://127.0.0.1:5000";
  std::vector<Message> r = feed(publish, 0, 1, 20, 8);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.type, MsgType::kJoinAck);
  EXPECT_EQ(r[0].membership.epoch, 2u);
  EXPECT_EQ(state_.membership().members.at(0).endpoint, "tcp://127.0.0.1:5000");
  EXPECT_EQ(state_.pending(), 1u);
  EXPECT_EQ(feed(publish, 0, 1, 30, 8).at(0).membership.epoch, 2u);  // resent: no change
}

// A JOIN that names another run (an island started with another config, or another run's
// island on this port) is refused with one line naming the first line where the two run
// texts differ, and the membership does not change; the same island naming this run joins.
TEST_F(StateTest, JoinOfAnotherRunIsRefusedNamingWhereItDiffers) {
  options_.run = "algorithm.name: diloco\nalgorithm.outer_lr: 0.7\nrun.name: r\n";
  auto refused = [&](const std::string& run, int64_t at_ms) {
    Message join = of(MsgType::kJoin);
    join.run = run;
    std::vector<Message> r = feed(join, 2, 1, at_ms);
    EXPECT_EQ(r.size(), 1u);
    EXPECT_EQ(r.at(0).header.type, MsgType::kError);
    EXPECT_EQ(r.at(0).error, proto::ErrorCode::kRejected);
    EXPECT_TRUE(state_.membership().members.empty());
    return r.at(0).text;
  };
  std::string why = refused("algorithm.name: diloco\nalgorithm.outer_lr: 0.5\nrun.name: r\n", 0);
  EXPECT_NE(why.find("it is of another run: its config has 'algorithm.outer_lr: 0.5' where this coordinator's has "
                     "'algorithm.outer_lr: 0.7'"),
            std::string::npos)
      << why;
  why = refused("", 10);
  EXPECT_NE(why.find("it names no run"), std::string::npos) << why;
  why = refused(options_.run + "run.seed: 3\n", 20);
  EXPECT_NE(why.find("its config has 'run.seed: 3' where this coordinator's has (nothing)"), std::string::npos) << why;
  why = refused("algorithm.name: " + std::string(2000, 'x') + "\n", 30);  // clipped to the ERROR bound
  EXPECT_NE(why.find("'algorithm.name: xxx"), std::string::npos) << why;
  Message join = of(MsgType::kJoin);
  join.run = options_.run;
  std::vector<Message> r = feed(join, 2, 1, 40);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.type, MsgType::kJoinAck);
  EXPECT_EQ(state_.membership().members.size(), 1u);
}

TEST_F(StateTest, SuspicionNeedsSilenceAndPendingRequestsExpire) {
  feed(of(MsgType::kJoin), 0, 1, 0);
  feed(of(MsgType::kJoin), 1, 2, 0);
  Message suspect = of(MsgType::kSuspect);
  suspect.peer = 1;
  feed(suspect, 0, 1, 100);
  feed(of(MsgType::kHeartbeat), 1, 2, 150);  // alive: clears it
  feed(of(MsgType::kHeartbeat), 0, 1, 450);
  tick(450);
  EXPECT_EQ(state_.membership().members.size(), 2u);
  feed(suspect, 0, 1, 460);  // now it stays silent for 3 periods
  feed(of(MsgType::kHeartbeat), 0, 1, 700);
  tick(700);
  EXPECT_EQ(state_.membership().members.size(), 2u);
  tick(770);
  EXPECT_EQ(ids(state_.membership()), std::vector<int>{0});

  Message pull = of(MsgType::kPull);
  pull.tag = 9;
  pull.wait_ms = 200;
  EXPECT_TRUE(feed(pull, 0, 1, 800, 11).empty());  // waits
  EXPECT_EQ(state_.pending(), 1u);
  EXPECT_TRUE(tick(900).empty());
  std::vector<Message> r = tick(1001);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].error, proto::ErrorCode::kTimeout);
  EXPECT_EQ(r[0].header.request_id, 11u);
  EXPECT_EQ(state_.pending(), 0u);
}

}  // namespace
}  // namespace atl::transport::testing
