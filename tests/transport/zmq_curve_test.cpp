// CurveZMQ: key files (atoll keygen), and an allow-listed coordinator that lets in exactly
// the islands whose public key it knows.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "transport/zmq/curve.h"
#include "tests/transport/zmq_test_util.h"

namespace atl::transport::testing {
namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_CURVE()                                            \
  if (!curve::available().is_ok()) GTEST_SKIP() << curve::available().message()

int file_mode(const std::string& path) {
  struct stat info{};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return static_cast<int>(info.st_mode & 0777);
}

TEST(ZmqCurve, KeygenWritesAPrivateSecretAndNeverOverwrites) {
  SKIP_WITHOUT_CURVE();
  TempDir dir;
  StatusOr<curve::KeyPair> made = curve::generate_keypair(dir.str() + "/keys", "island-0");
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  EXPECT_TRUE(curve::valid_key_text(made->public_key));
  EXPECT_TRUE(curve::valid_key_text(made->secret_key));
  EXPECT_EQ(file_mode(dir.str() + "/keys/island-0.key"), 0600);
  EXPECT_EQ(file_mode(dir.str() + "/keys/island-0.pub"), 0644);

  StatusOr<curve::KeyPair> loaded = curve::load_keypair(dir.str() + "/keys", "island-0");
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->public_key, made->public_key);
  EXPECT_EQ(loaded->secret_key, made->secret_key);
  StatusOr<std::string> pub = curve::load_public_key(dir.str() + "/keys/island-0.pub");
  ASSERT_TRUE(pub.is_ok());
  EXPECT_EQ(*pub, made->public_key);

  StatusOr<curve::KeyPair> again = curve::generate_keypair(dir.str() + "/keys", "island-0");
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("already exists"), std::string::npos);
  EXPECT_EQ(curve::load_keypair(dir.str() + "/keys", "island-0").value().secret_key,
            made->secret_key);  // untouched
  EXPECT_EQ(curve::generate_keypair(dir.str(), "../escape").status().code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(curve::load_keypair(dir.str(), "missing").status().code(), StatusCode::kNotFound);
  std::ofstream(dir.str() + "/bad.key") << "not a key\n";
  EXPECT_EQ(curve::load_keypair(dir.str(), "bad").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(curve::load_allowed_keys(dir.str()).status().code(), StatusCode::kNotFound);
}

// keys/coordinator.*, keys/island-{0,1}.*, and keys/allowed/island-0.pub only.
struct CurveRun {
  TempDir dir;
  std::string keys;
  curve::KeyPair coordinator, island0, island1;
  std::unique_ptr<Coordinator> coord;

  void start() {
    keys = dir.str() + "/keys";
    coordinator = curve::generate_keypair(keys, "coordinator").value();
    island0 = curve::generate_keypair(keys, "island-0").value();
    island1 = curve::generate_keypair(keys, "island-1").value();
    fs::create_directories(keys + "/allowed");
    fs::copy_file(keys + "/island-0.pub", keys + "/allowed/island-0.pub");
    ASSERT_EQ(curve::load_allowed_keys(keys).value(), std::vector<std::string>{island0.public_key});
    CoordinatorOptions co = fast_coordinator();
    co.curve = true;
    co.curve_secret_key = curve::load_keypair(keys, "coordinator").value().secret_key;
    co.keys_dir = keys;
    coord = start_coordinator(co);
    ASSERT_TRUE(coord);
    EXPECT_EQ(coord->public_key(), coordinator.public_key);
  }
  ControlClientOptions client(int id, const curve::KeyPair& keys_of) const {
    ControlClientOptions o = fast_client(coord->endpoint(), id);
    o.curve = true;
    o.curve_server_key = coordinator.public_key;
    o.curve_keys = keys_of;
    return o;
  }
};

TEST(ZmqCurve, AllowedKeyJoinsUnknownKeyIsRefusedAndTheRunGoesOn) {
  SKIP_WITHOUT_CURVE();
  CurveRun run;
  ASSERT_NO_FATAL_FAILURE(run.start());
  auto a = join(run.client(0, run.island0));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->membership().members.at(0).public_key, run.island0.public_key);

  const auto t0 = Clock::now();
  StatusOr<std::unique_ptr<ZmqControlClient>> intruder =
      ZmqControlClient::connect(run.client(1, run.island1), in_ms(800));
  EXPECT_EQ(intruder.status().code(), StatusCode::kTimeout);
  EXPECT_NE(intruder.status().message().find("refused this island's CURVE key"), std::string::npos)
      << intruder.status().message();
  EXPECT_LT(ms_since(t0), 3000);
  EXPECT_GE(run.coord->stats().handshakes_refused, 1u);

  // Island 0 never noticed.
  EXPECT_EQ(ids(run.coord->membership()), std::vector<int>{0});
  ASSERT_TRUE(a->store_set("k", {1}).is_ok());
  EXPECT_EQ(*a->store_get("k", in_ms(1000)), std::vector<uint8_t>{1});

  // Copying island 1's key into allowed/ lets it in without a restart.
  fs::copy_file(run.keys + "/island-1.pub", run.keys + "/allowed/island-1.pub");
  auto b = join(run.client(1, run.island1));
  ASSERT_TRUE(b);
  EXPECT_EQ(ids(wait_for_ids(*a, {0, 1})), (std::vector<int>{0, 1}));

  // An allowed key cannot take over another island's id.
  StatusOr<std::unique_ptr<ZmqControlClient>> thief = ZmqControlClient::connect(run.client(0, run.island1), in_ms(2000));
  EXPECT_EQ(thief.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(thief.status().message().find("another CURVE key"), std::string::npos) << thief.status().message();
  EXPECT_TRUE(a->store_set("k2", {2}).is_ok());
}

// give_up_when_refused (what `atoll island` sets): the refusal ends connect() at once, long
// before the join deadline, with the reason; the coordinator lists the refused key.
TEST(ZmqCurve, RefusedClientGivesUpAtOnceWhenAsked) {
  SKIP_WITHOUT_CURVE();
  CurveRun run;
  ASSERT_NO_FATAL_FAILURE(run.start());
  ControlClientOptions o = run.client(1, run.island1);
  o.give_up_when_refused = true;
  const auto t0 = Clock::now();
  StatusOr<std::unique_ptr<ZmqControlClient>> refused = ZmqControlClient::connect(o, in_ms(20000));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("refused this island's CURVE key (ZAP status 400)"), std::string::npos)
      << refused.status().message();
  EXPECT_LT(ms_since(t0), 5000) << "waited for the join deadline";
  for (int i = 0; i < 50 && run.coord->refused_keys().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(run.coord->refused_keys(), std::vector<std::string>{run.island1.public_key});
  // An allowed key is not affected by the option.
  ControlClientOptions ok = run.client(0, run.island0);
  ok.give_up_when_refused = true;
  EXPECT_TRUE(join(ok));
}

// The coordinator's own store_set answers an island's waiting STORE_GET (the start decision
// travels this way, src/run/start_gate.h).
TEST(ZmqCurve, CoordinatorStoreSetAnswersWaitingIslands) {
  SKIP_WITHOUT_CURVE();
  CurveRun run;
  ASSERT_NO_FATAL_FAILURE(run.start());
  auto a = join(run.client(0, run.island0));
  ASSERT_TRUE(a);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    run.coord->store_set("atoll/run/start", {'g', 'o'});
  });
  auto got = a->store_get("atoll/run/start", in_ms(5000));
  setter.join();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, (std::vector<uint8_t>{'g', 'o'}));
  auto again = a->store_peek("atoll/run/start");
  ASSERT_TRUE(again.is_ok());
  EXPECT_TRUE(again->has_value());
}

TEST(ZmqCurve, PlainOrMisconfiguredClientsCannotJoin) {
  SKIP_WITHOUT_CURVE();
  CurveRun run;
  ASSERT_NO_FATAL_FAILURE(run.start());
  // No CURVE at all.
  StatusOr<std::unique_ptr<ZmqControlClient>> plain =
      ZmqControlClient::connect(fast_client(run.coord->endpoint(), 0), in_ms(500));
  EXPECT_EQ(plain.status().code(), StatusCode::kTimeout);
  // An allowed island key, but the wrong coordinator key: the client cannot authenticate it.
  ControlClientOptions wrong = run.client(0, run.island0);
  wrong.curve_server_key = run.island1.public_key;
  StatusOr<std::unique_ptr<ZmqControlClient>> spoofed = ZmqControlClient::connect(wrong, in_ms(500));
  EXPECT_EQ(spoofed.status().code(), StatusCode::kTimeout);
  EXPECT_TRUE(run.coord->membership().members.empty());
  EXPECT_GE(run.coord->stats().handshakes_refused, 2u);  // both seen, and logged, by the coordinator
  // Bad option values are caught before any socket.
  ControlClientOptions broken = run.client(0, run.island0);
  broken.curve_server_key = "short";
  EXPECT_EQ(ZmqControlClient::connect(broken, in_ms(100)).status().code(), StatusCode::kInvalidArgument);
  CoordinatorOptions bad = fast_coordinator();
  bad.curve = true;
  bad.curve_secret_key = "nope";
  EXPECT_EQ(Coordinator::start(bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace atl::transport::testing
