// The state hand-over of real runs (src/run/handover.h): the bytes, and a donor and a joiner
// over a real coordinator on loopback.
#include "src/run/handover.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <future>
#include <string>
#include <vector>

#include "tests/transport/zmq_test_util.h"

namespace atl::run {
namespace {

using transport::testing::fast_client;
using transport::testing::in_ms;
using transport::testing::join;
using transport::testing::start_coordinator;

Handover sample(int64_t n) {
  Handover h;
  h.donor = 3;
  h.epoch = 17;
  h.step = 250;
  h.first_seq = 49;
  h.subgroup_seqs = {{1, 12}, {4, 0}, {70000, 3}};
  h.global = torch::randn({n});
  h.state.add("round", int64_t{48}).add("outer.momentum", torch::randn({n})).add("outer.second_moment", at::Tensor());
  h.state.add("ids", torch::arange(6, torch::kLong).view({2, 3})).add_real("pushed_at", 2.5);
  return h;
}

void expect_same(const Handover& a, const Handover& b) {
  EXPECT_EQ(a.donor, b.donor);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.first_seq, b.first_seq);
  EXPECT_EQ(a.subgroup_seqs, b.subgroup_seqs);
  EXPECT_EQ(core::handover_round(a), core::handover_round(b));
  EXPECT_TRUE(at::equal(a.global, b.global));
  ASSERT_EQ(a.state.entries().size(), b.state.entries().size());
  for (size_t i = 0; i < a.state.entries().size(); ++i) {
    const NamedState::Entry &x = a.state.entries()[i], &y = b.state.entries()[i];
    EXPECT_EQ(x.name, y.name) << i;
    ASSERT_EQ(x.kind, y.kind) << i;
    EXPECT_EQ(x.integer, y.integer) << i;
    EXPECT_EQ(x.real, y.real) << i;
    ASSERT_EQ(x.tensor.defined(), y.tensor.defined()) << i;
    if (!x.tensor.defined()) continue;
    EXPECT_EQ(x.tensor.scalar_type(), y.tensor.scalar_type()) << i;
    EXPECT_TRUE(at::equal(x.tensor, y.tensor)) << i;
  }
}

TEST(Handover, BytesRoundTripEveryFieldBitwise) {
  const Handover h = sample(1001);
  const std::vector<uint8_t> bytes = encode_handover(h);
  Handover back;
  ASSERT_TRUE(decode_handover(bytes.data(), bytes.size(), &back).is_ok());
  expect_same(h, back);
}

TEST(Handover, TruncatedExtendedOrAlteredBytesAreRejected) {
  const std::vector<uint8_t> bytes = encode_handover(sample(10));
  Handover h;
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(decode_handover(bytes.data(), n, &h).code(), StatusCode::kCorrupt) << "first " << n << " bytes";
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(decode_handover(longer.data(), longer.size(), &h).code(), StatusCode::kCorrupt);
  std::vector<uint8_t> magic = bytes;
  magic[0] = 'X';
  EXPECT_EQ(decode_handover(magic.data(), magic.size(), &h).code(), StatusCode::kCorrupt);
  std::vector<uint8_t> dtype = bytes;
  dtype[4 + 4 + 4 + 8 + 8 + 8 + 1] = 99;  // the global model's dtype id (after its defined byte)
  const Status st = decode_handover(dtype.data(), dtype.size(), &h);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("dtype"), std::string::npos) << st.message();
}

TEST(Handover, AnEntryOfUnknownKindOrNamedTwiceIsRejected) {
  Handover h;
  h.global = torch::zeros({4});
  h.state.add("round", int64_t{3});
  std::vector<uint8_t> bytes = encode_handover(h);
  // The entry's kind byte: after the header (36 bytes), the global model's tensor, the entry
  // count (8) and the name (8 + 5).
  const size_t tensor = 1 + 1 + 8 + 8 + 8 + 4 * 4;
  const size_t kind = 36 + tensor + 8 + 8 + 5;
  ASSERT_EQ(bytes[kind], 1);
  bytes[kind] = 7;
  Handover back;
  Status st = decode_handover(bytes.data(), bytes.size(), &back);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("unknown kind 7"), std::string::npos) << st.message();
  // The same name twice (the second entry's bytes appended, the count raised).
  bytes = encode_handover(h);
  const std::vector<uint8_t> entry(bytes.begin() + static_cast<long>(36 + tensor + 8),
                                   bytes.begin() + static_cast<long>(kind + 1 + 8));
  bytes.insert(bytes.begin() + static_cast<long>(kind + 1 + 8), entry.begin(), entry.end());
  bytes[36 + tensor] = 2;
  st = decode_handover(bytes.data(), bytes.size(), &back);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("'round' twice"), std::string::npos) << st.message();
}

// Island 0 is the donor; island 1 joins without a data endpoint. A hand-over left in the store
// for an earlier island 1 is ignored; island 0 hands its state over at its step boundary (in
// several store parts: 48 MB of tensors) and waits until island 1 publishes its endpoint.
TEST(Handover, DonorHandsItsStateToAJoinerThatThenTakesPart) {
  auto coord = start_coordinator();
  ASSERT_TRUE(coord);
  auto donor_client = join(fast_client(coord->endpoint(), 0));
  ASSERT_TRUE(donor_client);
  Handover stale = sample(4);
  stale.epoch = 0;
  ASSERT_TRUE(publish_handover(*donor_client, 1, stale).is_ok());

  transport::ControlClientOptions o = fast_client(coord->endpoint(), 1);
  o.data_endpoint = "";
  auto joiner = join(o);
  ASSERT_TRUE(joiner);
  const uint64_t join_epoch = joiner->membership().epoch;
  ASSERT_GT(join_epoch, stale.epoch);

  Handover state = sample(6 << 20);
  state.donor = 0;
  std::vector<std::string> records;
  HandoverDonor donor(
      *donor_client, [&] { return state; }, [&](const std::string& r) { records.push_back(r); },
      [] { return Status::ok(); });
  while (donor_client->membership().members.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto served = std::async(std::launch::async, [&] { donor.at_step_boundary(); });
  struct LeaveFirst {  // on a failed assertion: the joiner leaves, which ends the donor's wait
    std::unique_ptr<transport::ZmqControlClient>& client;
    ~LeaveFirst() { client.reset(); }
  } leave_first{joiner};

  StatusOr<Handover> got = fetch_handover(*joiner, 1, join_epoch, *in_ms(20000), [] { return Status::ok(); });
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_GE(got->epoch, join_epoch);
  Handover expected = state;
  expected.epoch = got->epoch;
  expect_same(expected, *got);
  EXPECT_EQ(served.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the donor went on before the joiner took part";

  ASSERT_TRUE(joiner->publish_endpoint("tcp://127.0.0.1:31001", in_ms(3000)).is_ok());
  ASSERT_EQ(served.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_NE(records[0].find("\"joiner\":1"), std::string::npos) << records[0];
  EXPECT_NE(records[0].find("\"joined\":true"), std::string::npos) << records[0];

  // Nobody waits any more: the next step boundary does nothing.
  donor.at_step_boundary();
  EXPECT_EQ(records.size(), 1u);
}

// A joiner whose state this island does not hold (DiPaCo: a joiner on another path) is left
// to an island that holds it: nothing is made, published or waited for.
TEST(Handover, DonorServesOnlyJoinersWhoseStateItHolds) {
  auto coord = start_coordinator();
  ASSERT_TRUE(coord);
  auto donor_client = join(fast_client(coord->endpoint(), 0));
  ASSERT_TRUE(donor_client);
  transport::ControlClientOptions o = fast_client(coord->endpoint(), 1);
  o.data_endpoint = "";
  auto joiner = join(o);
  ASSERT_TRUE(joiner);
  int made = 0;
  std::vector<std::string> records;
  HandoverDonor donor(
      *donor_client,
      [&] {
        ++made;
        return sample(4);
      },
      [&](const std::string& r) { records.push_back(r); }, [] { return Status::ok(); },
      core::Roles([](int island) { return island % 2; }));  // two paths
  while (donor_client->membership().members.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto served = std::async(std::launch::async, [&] { donor.at_step_boundary(); });
  struct LeaveFirst {  // on a failed assertion: the joiner leaves, which ends a donor's wait
    std::unique_ptr<transport::ZmqControlClient>& client;
    ~LeaveFirst() { client.reset(); }
  } leave_first{joiner};
  ASSERT_EQ(served.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "island 0 served island 1";
  EXPECT_EQ(made, 0);
  EXPECT_TRUE(records.empty());
}

// A hand-over from an island that is not (or no longer) a member is not taken; a joiner that
// finds no live island to hand it the state gives up with that reason.
TEST(Handover, JoinerTakesNothingFromAGoneDonorAndGivesUpWhenAskedTo) {
  auto coord = start_coordinator();
  ASSERT_TRUE(coord);
  transport::ControlClientOptions o = fast_client(coord->endpoint(), 1);
  o.data_endpoint = "";
  auto joiner = join(o);
  ASSERT_TRUE(joiner);
  Handover gone = sample(4);
  gone.donor = 5;
  gone.epoch = joiner->membership().epoch + 10;
  ASSERT_TRUE(publish_handover(*joiner, 1, gone).is_ok());
  StatusOr<Handover> got = fetch_handover(*joiner, 1, 0, *in_ms(20000),
                                          [] { return Status(StatusCode::kPeerLost, "nobody left"); });
  EXPECT_EQ(got.status().code(), StatusCode::kPeerLost);
}

}  // namespace
}  // namespace atl::run
