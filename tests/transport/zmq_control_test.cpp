// The coordinator and ZmqControlClient over real loopback sockets, islands as threads:
// membership, failure detection, suspicion, rejoin, coordinator restart, store, server role,
// records, and hostile input from a raw socket.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.hpp>

#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "transport/zmq/protocol.h"
#include "tests/transport/zmq_test_util.h"

namespace atl::transport::testing {
namespace {

TEST(ZmqControl, ThreeIslandsSeeTheSameMembership) {
  MembershipLog changes;
  CoordinatorOptions co = fast_coordinator();
  co.expected_islands = 3;
  co.on_membership = changes.callback();
  auto coord = start_coordinator(co);
  ASSERT_TRUE(coord);
  std::vector<std::unique_ptr<ZmqControlClient>> islands(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { islands[i] = join(fast_client(coord->endpoint(), i)); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(islands[i]);
    const Membership m = wait_for_ids(*islands[i], {0, 1, 2});
    EXPECT_EQ(ids(m), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(m.epoch, 3u);  // one bump per join
    EXPECT_EQ(m.members[1].endpoint, "tcp://127.0.0.1:31001");
    EXPECT_EQ(islands[i]->self(), i);
  }
  EXPECT_EQ(coord->membership().epoch, 3u);
  EXPECT_TRUE(changes.wait_for(3, {0, 1, 2}));
}

TEST(ZmqControl, SilentIslandIsDeclaredDeadWithinTheTimeout) {
  MembershipLog changes;
  CoordinatorOptions co = fast_coordinator();
  co.on_membership = changes.callback();
  auto coord = start_coordinator(co);
  auto a = join(fast_client(coord->endpoint(), 0));
  auto b = join(fast_client(coord->endpoint(), 1));
  ControlClientOptions crash = fast_client(coord->endpoint(), 2);
  crash.leave_on_destroy = false;
  auto c = join(crash);
  ASSERT_TRUE(a && b && c);
  const uint64_t before = wait_for_ids(*a, {0, 1, 2}).epoch;
  const auto t0 = Clock::now();
  c.reset();  // gone without LEAVE, like kill -9
  const Membership m = wait_for_ids(*a, {0, 1}, 3000);
  const int64_t took = ms_since(t0);
  EXPECT_EQ(ids(m), (std::vector<int>{0, 1}));
  EXPECT_EQ(m.epoch, before + 1);
  EXPECT_GE(took, 400);    // not before the 500 ms timeout (minus the last heartbeat's age)
  EXPECT_LE(took, 1500);   // timeout + tick + delivery, with slack for a loaded machine
  EXPECT_EQ(ids(wait_for_ids(*b, {0, 1})), (std::vector<int>{0, 1}));
  EXPECT_TRUE(changes.wait_for_reason("island 2 failed (no heartbeat"));
  EXPECT_TRUE(changes.wait_for(before + 1, {0, 1}));
}

TEST(ZmqControl, LeaveIsSeenAtOnce) {
  CoordinatorOptions co = fast_coordinator();
  co.heartbeat_timeout_ms = 5000;  // a failure would take 5 s: this must be the LEAVE
  auto coord = start_coordinator(co);
  auto a = join(fast_client(coord->endpoint(), 0));
  auto b = join(fast_client(coord->endpoint(), 1));
  ASSERT_TRUE(a && b);
  wait_for_ids(*a, {0, 1});
  const auto t0 = Clock::now();
  b.reset();
  EXPECT_EQ(ids(wait_for_ids(*a, {0}, 3000)), std::vector<int>{0});
  EXPECT_LT(ms_since(t0), 2000);
}

TEST(ZmqControl, SuspectIsConfirmedOnlyByMissingHeartbeats) {
  CoordinatorOptions co = fast_coordinator();
  co.heartbeat_timeout_ms = 10000;  // only the suspicion can be this fast
  auto coord = start_coordinator(co);
  auto a = join(fast_client(coord->endpoint(), 0));
  auto b = join(fast_client(coord->endpoint(), 1));
  ControlClientOptions crash = fast_client(coord->endpoint(), 2);
  crash.leave_on_destroy = false;
  auto c = join(crash);
  ASSERT_TRUE(a && b && c);
  const uint64_t epoch = wait_for_ids(*a, {0, 1, 2}).epoch;

  a->suspect(1);  // alive: its heartbeats clear the suspicion
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_EQ(a->membership().epoch, epoch);
  EXPECT_EQ(coord->membership().members.size(), 3u);

  c.reset();
  const auto t0 = Clock::now();
  a->suspect(2);
  EXPECT_EQ(ids(wait_for_ids(*b, {0, 1}, 5000)), (std::vector<int>{0, 1}));
  EXPECT_LT(ms_since(t0), 2000);  // 3 heartbeat periods, far below the 10 s timeout
}

TEST(ZmqControl, RestartedIslandRejoinsWithItsIdAndSupersedesTheOld) {
  auto coord = start_coordinator();
  auto a = join(fast_client(coord->endpoint(), 0));
  ControlClientOptions old_opts = fast_client(coord->endpoint(), 1);
  old_opts.leave_on_destroy = false;
  auto old_b = join(old_opts);
  ASSERT_TRUE(a && old_b);
  const uint64_t epoch = wait_for_ids(*a, {0, 1}).epoch;

  // A new process with id 1 while the old one still runs (e.g. restarted before detection).
  auto new_b = join(fast_client(coord->endpoint(), 1));
  ASSERT_TRUE(new_b);
  Membership m = a->wait_for_change(epoch, in_ms(3000));
  EXPECT_EQ(ids(m), (std::vector<int>{0, 1}));
  EXPECT_EQ(m.epoch, epoch + 1);  // the rejoin is a new epoch
  EXPECT_TRUE(new_b->store_set("rejoined", {1}).is_ok());

  // The old process is out of the run: told so, and every call says it.
  Status st = old_b->store_set("old", {2});
  EXPECT_EQ(st.code(), StatusCode::kPeerLost) << st.to_string();
  EXPECT_NE(st.message().find("another process"), std::string::npos) << st.message();
  EXPECT_EQ(old_b->status().code(), StatusCode::kPeerLost);
  EXPECT_TRUE(new_b->status().is_ok());
  old_b.reset();
  std::this_thread::sleep_for(milliseconds(700));  // longer than the failure timeout
  EXPECT_EQ(ids(coord->membership()), (std::vector<int>{0, 1}));  // the new 1 is alive
}

// An island that joins without a data endpoint (it rejoins a running run and waits for its
// state) is a member without one; publish_endpoint() shows it in a new epoch, keeps the session,
// and a STORE_GET it left waiting is still answered.
TEST(ZmqControl, EndpointPublishedLaterIsANewEpochOfTheSameSession) {
  auto coord = start_coordinator();
  auto a = join(fast_client(coord->endpoint(), 0));
  ControlClientOptions waiting = fast_client(coord->endpoint(), 1);
  waiting.data_endpoint = "";
  auto b = join(waiting);
  ASSERT_TRUE(a && b);
  Membership m = wait_for_ids(*a, {0, 1});
  EXPECT_TRUE(in_collectives(m.members[0]));
  EXPECT_FALSE(in_collectives(m.members[1]));

  StatusOr<std::optional<std::vector<uint8_t>>> none = b->store_peek("handover");
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());  // answered at once: not set
  auto get = std::async(std::launch::async, [&] { return b->store_get("later", in_ms(5000)); });
  std::this_thread::sleep_for(milliseconds(100));

  ASSERT_TRUE(b->publish_endpoint("tcp://127.0.0.1:31101", in_ms(3000)).is_ok());
  const Membership shown = a->wait_for_change(m.epoch, in_ms(3000));
  EXPECT_EQ(shown.epoch, m.epoch + 1);
  ASSERT_EQ(ids(shown), (std::vector<int>{0, 1}));
  EXPECT_EQ(shown.members[1].endpoint, "tcp://127.0.0.1:31101");
  EXPECT_EQ(b->joins(), 1u);  // the same session, not a rejoin
  EXPECT_TRUE(b->status().is_ok());

  ASSERT_TRUE(a->store_set("later", {4}).is_ok());
  StatusOr<std::vector<uint8_t>> got = get.get();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, std::vector<uint8_t>{4});
  StatusOr<std::optional<std::vector<uint8_t>>> peeked = b->store_peek("later");
  ASSERT_TRUE(peeked.is_ok() && peeked->has_value());
  EXPECT_EQ(**peeked, std::vector<uint8_t>{4});
  EXPECT_EQ(b->publish_endpoint("", in_ms(100)).code(), StatusCode::kInvalidArgument);
}

TEST(ZmqControl, IslandsRejoinARestartedCoordinatorWithLaterEpochs) {
  auto coord = start_coordinator();
  const std::string endpoint = coord->endpoint();
  auto a = join(fast_client(endpoint, 0));
  auto b = join(fast_client(endpoint, 1));
  ASSERT_TRUE(a && b);
  const uint64_t epoch = wait_for_ids(*a, {0, 1}).epoch;
  coord.reset();

  CoordinatorOptions co = fast_coordinator();
  co.endpoint = endpoint;  // same port
  coord = start_coordinator(co);
  ASSERT_TRUE(coord);
  // The islands hear "unknown island" on their next heartbeat and join again.
  EXPECT_EQ(ids(wait_for_ids(*coord, {0, 1})), (std::vector<int>{0, 1}));
  const Deadline deadline = in_ms(3000);
  Membership m = a->membership();
  while ((ids(m) != std::vector<int>{0, 1} || m.epoch <= epoch) && Clock::now() < *deadline) {
    m = a->wait_for_change(m.epoch, deadline);
  }
  EXPECT_EQ(ids(m), (std::vector<int>{0, 1}));
  EXPECT_GT(m.epoch, epoch);  // epochs never go back, even across a coordinator restart
  EXPECT_GT(coord->membership().epoch, epoch);
  EXPECT_GE(a->joins(), 2u);
  ASSERT_TRUE(b->store_set("after-restart", {7}).is_ok());
  StatusOr<std::vector<uint8_t>> v = a->store_get("after-restart", in_ms(2000));
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(*v, std::vector<uint8_t>{7});
}

// A coordinator restarted from the running state its predecessor saved
// (CoordinatorOptions::persist / restore; docs/checkpoints.md "Coordinator restart") still
// knows the island: no JOIN again, the same epoch, the store kept; and of the records the
// island resends after the reconnection, only those the saved state does not hold are written.
TEST(ZmqControl, CoordinatorRestartedWithItsStateKeepsTheIslandAndWritesEachRecordOnce) {
  RecordSink first;
  std::mutex mu;
  std::optional<CoordinatorSnapshot> saved;
  CoordinatorOptions co = fast_coordinator();
  co.record_sink = first.callback();
  co.persist = [&](const CoordinatorSnapshot& s) {
    std::lock_guard<std::mutex> lock(mu);
    saved = s;
  };
  co.persist_ms = 10;
  auto coord = start_coordinator(co);
  const std::string endpoint = coord->endpoint();
  auto a = join(fast_client(endpoint, 0));
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->store_set("kept", {7}).is_ok());
  a->record(R"({"n":1})");
  a->record(R"({"n":2})");
  ASSERT_TRUE(first.wait_for(R"({"n":2})"));
  auto saved_both = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return saved && saved->records.size() == 1 && saved->records[0].floor == 2;
  };
  for (int i = 0; i < 200 && !saved_both(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(saved_both());
  const uint64_t epoch = a->membership().epoch;
  coord.reset();
  a->record(R"({"n":3})");  // while no coordinator listens

  RecordSink second;
  CoordinatorOptions co2 = fast_coordinator();
  co2.endpoint = endpoint;  // same port
  co2.record_sink = second.callback();
  {
    std::lock_guard<std::mutex> lock(mu);
    co2.restore = saved;
  }
  coord = start_coordinator(co2);
  ASSERT_TRUE(coord);
  EXPECT_TRUE(second.wait_for(R"({"n":3})", 5000));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(second.lines(), (std::vector<std::string>{R"({"n":3})"}));
  EXPECT_EQ(a->joins(), 1u);
  EXPECT_TRUE(a->status().is_ok());
  EXPECT_EQ(a->membership().epoch, epoch);
  EXPECT_EQ(coord->membership().epoch, epoch);
  StatusOr<std::vector<uint8_t>> v = a->store_get("kept", in_ms(2000));
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(*v, std::vector<uint8_t>{7});
}

// A restarted coordinator's membership() holds the restored members from its start, before
// any island has been heard from: the coordinator process ends a run whose members are all
// gone, and an empty view read before the first message once ended a picked-up run at once.
TEST(ZmqControl, ARestoredCoordinatorShowsItsMembersBeforeHearingFromThem) {
  CoordinatorSnapshot saved;
  saved.epoch = 6;
  saved.members = {{0, 11, "tcp://127.0.0.1:1", ""}, {2, 12, "tcp://127.0.0.1:2", ""}};
  CoordinatorOptions co = fast_coordinator();
  co.restore = saved;
  auto coord = start_coordinator(co);
  ASSERT_TRUE(coord);
  const Membership view = coord->membership();
  EXPECT_EQ(view.epoch, 6u);
  ASSERT_EQ(view.members.size(), 2u);
  EXPECT_EQ(view.members[0].id, 0);
  EXPECT_EQ(view.members[1].id, 2);
  EXPECT_EQ(view.members[1].endpoint, "tcp://127.0.0.1:2");
  // Waiting for a change from the restored epoch waits; from any other epoch it does not.
  EXPECT_EQ(coord->wait_for_change(6, in_ms(50)).epoch, 6u);
  EXPECT_EQ(coord->wait_for_change(0, in_ms(5000)).members.size(), 2u);
}

// Coordinator::end_run: every island's client fails with the reason and says it will not join
// again; a process that joins after is refused with it; the islands' LEAVEs still arrive.
TEST(ZmqControl, AnEndedRunIsToldToItsIslandsAndToLaterJoins) {
  auto coord = start_coordinator();
  auto a = join(fast_client(coord->endpoint(), 0));
  auto b = join(fast_client(coord->endpoint(), 1));
  ASSERT_TRUE(a && b);
  coord->end_run("the run failed: checkpoint of step 10 not written");
  for (auto* c : {a.get(), b.get()}) {
    const auto until = Clock::now() + milliseconds(5000);
    while (c->status().is_ok() && Clock::now() < until) std::this_thread::sleep_for(milliseconds(5));
    EXPECT_TRUE(c->run_ended());
    EXPECT_EQ(c->status().code(), StatusCode::kPeerLost);
    EXPECT_NE(c->status().message().find("the coordinator ended the run: the run failed: checkpoint of step 10"),
              std::string::npos) << c->status().message();
    EXPECT_EQ(c->store_set("k", {1}).code(), StatusCode::kPeerLost);
  }
  auto late = ZmqControlClient::connect(fast_client(coord->endpoint(), 2), in_ms(5000));
  ASSERT_FALSE(late.is_ok());
  EXPECT_NE(late.status().message().find("the coordinator ended the run"), std::string::npos) << late.status().message();
  a.reset();
  b.reset();
  const auto until = Clock::now() + milliseconds(5000);
  while (!coord->membership().members.empty() && Clock::now() < until) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_TRUE(coord->membership().members.empty()) << "the islands' LEAVEs did not arrive";
}

TEST(ZmqControl, StoreGetWaitsForTheSet) {
  auto coord = start_coordinator();
  auto a = join(fast_client(coord->endpoint(), 0));
  auto b = join(fast_client(coord->endpoint(), 1));
  ASSERT_TRUE(a && b);
  auto waiting = std::async(std::launch::async, [&] { return a->store_get("gloo/1/rank0", in_ms(5000)); });
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_EQ(waiting.wait_for(milliseconds(0)), std::future_status::timeout);  // still waiting
  ASSERT_TRUE(b->store_set("gloo/1/rank0", {1, 2, 3}).is_ok());
  StatusOr<std::vector<uint8_t>> got = waiting.get();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, (std::vector<uint8_t>{1, 2, 3}));

  ASSERT_TRUE(a->store_set("gloo/1/rank0", {9}).is_ok());  // overwrite
  EXPECT_EQ(*b->store_get("gloo/1/rank0", in_ms(1000)), std::vector<uint8_t>{9});
  ASSERT_TRUE(a->store_set("empty", {}).is_ok());
  EXPECT_TRUE(b->store_get("empty", in_ms(1000))->empty());

  const auto t0 = Clock::now();
  StatusOr<std::vector<uint8_t>> missing = b->store_get("never", in_ms(300));
  EXPECT_EQ(missing.status().code(), StatusCode::kTimeout);
  EXPECT_GE(ms_since(t0), 250);
  EXPECT_LT(ms_since(t0), 2000);
  EXPECT_EQ(coord->stats().store_keys, 2u);
}

TEST(ZmqControl, PushAndPullThroughTheHostedServer) {
  MeanServer server(2);
  CoordinatorOptions co = fast_coordinator();
  co.server = &server;
  auto coord = start_coordinator(co);
  auto a = join(fast_client(coord->endpoint(), 0));
  auto b = join(fast_client(coord->endpoint(), 1));
  ASSERT_TRUE(a && b);
  const compression::Pipeline fp32;

  auto early = std::async(std::launch::async, [&] { return a->pull(5, in_ms(5000)); });
  ASSERT_TRUE(a->push(5, encode_tensor(fp32, torch::tensor({1.f, 2.f, 3.f})), 1.0).is_ok());
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(early.wait_for(milliseconds(0)), std::future_status::timeout);  // 1 of 2 pushes
  ASSERT_TRUE(b->push(5, encode_tensor(fp32, torch::tensor({5.f, 6.f, 7.f})), 3.0).is_ok());
  StatusOr<std::vector<uint8_t>> got = early.get();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const at::Tensor want = torch::tensor({4.f, 5.f, 6.f});  // (1*[1,2,3] + 3*[5,6,7]) / 4
  EXPECT_TRUE(torch::equal(decode_tensor(fp32, *got, 3), want));
  StatusOr<std::vector<uint8_t>> late = b->pull(5, in_ms(1000));
  ASSERT_TRUE(late.is_ok());
  EXPECT_TRUE(torch::equal(decode_tensor(fp32, *late, 3), want));
  EXPECT_EQ(server.pushers(), (std::vector<int>{0, 1}));

  EXPECT_EQ(a->pull(6, in_ms(200)).status().code(), StatusCode::kTimeout);
  std::vector<uint8_t> damaged = encode_tensor(fp32, torch::tensor({1.f}));
  damaged.back() ^= 1;
  EXPECT_EQ(a->push(6, damaged, 1.0).code(), StatusCode::kCorrupt);
  EXPECT_EQ(server.pushers().size(), 2u);  // not applied
}

// The hosted server role hears of lost islands (failed or left) and of the time while pulls
// wait on it (OuterServer::on_member_lost / on_time, as fedavg's deadlines and dropped
// clients need): a pull waiting for a loss is answered once the island is declared dead, one
// waiting for a deadline once the coordinator's clock passed it, with no message from anyone.
class WaitingServer final : public OuterServer {
 public:
  void on_push(int, uint64_t, const at::Tensor&, double) override {}
  std::optional<at::Tensor> on_pull(int, uint64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    if ((tag == 1 && !lost_.empty()) || (tag == 2 && deadline_passed_)) return torch::tensor({static_cast<float>(tag)});
    return std::nullopt;
  }
  bool on_member_lost(int island, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    lost_.push_back(island);
    return true;
  }
  double on_time(double now_s) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_) first_ = now_s;
    if (deadline_passed_ || now_s < *first_ + 0.3) return -1;
    deadline_passed_ = true;
    return *first_ + 0.3;
  }
  std::vector<int> lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<int> lost_;
  std::optional<double> first_;
  bool deadline_passed_ = false;
};

TEST(ZmqControl, HostedServerHearsOfLostIslandsAndOfTimeWhilePullsWait) {
  WaitingServer server;
  CoordinatorOptions co = fast_coordinator();
  co.server = &server;
  auto coord = start_coordinator(co);
  auto a = join(fast_client(coord->endpoint(), 0));
  ControlClientOptions crash = fast_client(coord->endpoint(), 2);
  crash.leave_on_destroy = false;
  auto c = join(crash);
  ASSERT_TRUE(a && c);
  wait_for_ids(*a, {0, 2});
  const compression::Pipeline fp32;
  // A deadline 0.3 s after the server first heard of the time (this pull): answered by the
  // coordinator's ticks.
  auto t0 = Clock::now();
  StatusOr<std::vector<uint8_t>> timed = a->pull(2, in_ms(5000));
  ASSERT_TRUE(timed.is_ok()) << timed.status().to_string();
  EXPECT_GE(ms_since(t0), 250);
  EXPECT_TRUE(torch::equal(decode_tensor(fp32, *timed, 1), torch::tensor({2.f})));
  // A loss: island 2 gone without LEAVE, declared dead after the heartbeat timeout.
  auto waiting = std::async(std::launch::async, [&] { return a->pull(1, in_ms(5000)); });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(waiting.wait_for(milliseconds(0)), std::future_status::timeout);
  EXPECT_TRUE(server.lost().empty());
  c.reset();
  StatusOr<std::vector<uint8_t>> after_loss = waiting.get();
  ASSERT_TRUE(after_loss.is_ok()) << after_loss.status().to_string();
  EXPECT_TRUE(torch::equal(decode_tensor(fp32, *after_loss, 1), torch::tensor({1.f})));
  EXPECT_EQ(server.lost(), std::vector<int>{2});
}

TEST(ZmqControl, WithoutServerPushAndPullAreUnavailable) {
  auto coord = start_coordinator();
  auto a = join(fast_client(coord->endpoint(), 0));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->push(1, encode_tensor({}, torch::ones({2})), 1.0).code(), StatusCode::kUnavailable);
  EXPECT_EQ(a->pull(1, in_ms(500)).status().code(), StatusCode::kUnavailable);
}

TEST(ZmqControl, RecordsReachTheSink) {
  RecordSink sink;
  CoordinatorOptions co = fast_coordinator();
  co.record_sink = sink.callback();
  auto coord = start_coordinator(co);
  auto a = join(fast_client(coord->endpoint(), 0));
  ASSERT_TRUE(a);
  a->record(R"({"island":0,"step":10,"loss":1.25})");
  a->record("{\"broken\":\n1}");  // two lines: refused by the client
  EXPECT_TRUE(sink.wait_for(R"({"island":0,"step":10,"loss":1.25})"));
  for (const std::string& l : sink.lines()) EXPECT_EQ(l.find("broken"), std::string::npos);
}

TEST(ZmqControl, JoinRefusalsAndTimeoutsAreClearStatuses) {
  CoordinatorOptions co = fast_coordinator();
  co.expected_islands = 2;
  auto coord = start_coordinator(co);
  StatusOr<std::unique_ptr<ZmqControlClient>> far = ZmqControlClient::connect(fast_client(coord->endpoint(), 5), in_ms(3000));
  EXPECT_EQ(far.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(far.status().message().find("outside [0, 2)"), std::string::npos) << far.status().message();

  // A port bound but not listening: connections are refused, and no other test process can
  // take the port meanwhile (a released one could become another test's coordinator).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string dead_endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const auto t0 = Clock::now();
  StatusOr<std::unique_ptr<ZmqControlClient>> none = ZmqControlClient::connect(fast_client(dead_endpoint, 0), in_ms(400));
  EXPECT_EQ(none.status().code(), StatusCode::kTimeout);
  EXPECT_NE(none.status().message().find("JOIN_ACK"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("nothing accepts connections"), std::string::npos)
      << none.status().message();
  EXPECT_LT(ms_since(t0), 2000);
  ::close(fd);
}

// Garbage of every kind from a raw DEALER: dropped, logged, and the islands keep working.
TEST(ZmqControl, HostileMessagesAreDroppedAndServiceContinues) {
  auto coord = start_coordinator();
  auto a = join(fast_client(coord->endpoint(), 0));
  auto b = join(fast_client(coord->endpoint(), 1));
  ASSERT_TRUE(a && b);
  const uint64_t epoch = wait_for_ids(*a, {0, 1}).epoch;

  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(coord->endpoint());
  std::mt19937_64 rng(3);
  int sent = 0;
  auto send = [&](const std::vector<uint8_t>& bytes) {
    raw.send(zmq::buffer(bytes));
    ++sent;
  };
  for (int i = 0; i < 200; ++i) {  // random bytes
    std::vector<uint8_t> junk(rng() % 300);
    for (auto& x : junk) x = static_cast<uint8_t>(rng());
    send(junk);
  }
  proto::Message set;
  set.header = proto::Header{proto::MsgType::kStoreSet, 0, epoch, 1, 12345};
  set.key = "stolen";
  const std::vector<uint8_t> value = {1, 2, 3};
  set.bytes = value;
  const std::vector<uint8_t> valid = proto::encode_or_throw(set);
  for (size_t n = 0; n < valid.size(); ++n) send({valid.begin(), valid.begin() + n});  // truncated
  for (size_t bit = 0; bit < valid.size() * 8; bit += 3) {  // bit flips
    std::vector<uint8_t> flipped = valid;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    send(flipped);
  }
  proto::Message ack;  // a coordinator-to-island type
  ack.header.type = proto::MsgType::kAck;
  send(proto::encode_or_throw(ack));
  raw.send(zmq::str_buffer("two"), zmq::send_flags::sndmore);  // multi-frame
  raw.send(zmq::str_buffer("frames"));
  ++sent;
  send({});
  // Well-formed but claims island 0 with another session: refused, island 0 untouched.
  send(valid);

  // Coordinator drops all but the last (which it answers with an ERROR).
  const auto t0 = Clock::now();
  while (coord->stats().dropped + 1 < static_cast<uint64_t>(sent) && ms_since(t0) < 5000) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(coord->stats().dropped, static_cast<uint64_t>(sent - 1));
  zmq::message_t reply;
  raw.set(zmq::sockopt::rcvtimeo, 2000);
  ASSERT_TRUE(raw.recv(reply));
  proto::Message err;
  ASSERT_TRUE(proto::parse(reply.data<uint8_t>(), reply.size(), &err).is_ok());
  EXPECT_EQ(err.header.type, proto::MsgType::kError);
  EXPECT_EQ(err.error, proto::ErrorCode::kSuperseded);

  ASSERT_TRUE(a->store_set("still-works", {4}).is_ok());
  EXPECT_EQ(*b->store_get("still-works", in_ms(1000)), std::vector<uint8_t>{4});
  EXPECT_EQ(b->store_get("stolen", in_ms(0)).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(a->membership().epoch, epoch);
  EXPECT_EQ(ids(coord->membership()), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace atl::transport::testing
