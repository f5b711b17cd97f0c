// A WAN outcome that ends an island's run (a collective that timed out or lost everyone, a
// failed push or pull) reaches the island loop as atl::StatusError carrying the transport's
// Status, with one line naming the island, the exchange and the step (docs/errors.md); a
// collective that lost some members but not all is the survivors' result and the run goes
// on. Every algorithm, through a group that injects the fault.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "algorithms/algorithm.h"
#include "compression/pipeline.h"
#include "src/base/status.h"
#include "tests/algorithms/options_util.h"
#include "transport/group.h"

namespace atl::algorithms {
namespace {

// Fault injection: every exchange completes at once with `result`, as over a WAN that timed
// out or lost members. Membership: islands 0 and 1.
class FaultyGroup final : public transport::Group {
 public:
  FaultyGroup(int self, transport::CollectiveResult result) : self_(self), result_(std::move(result)) {}
  transport::MembershipView view() const override { return {1, {0, 1}, self_}; }
  std::unique_ptr<transport::Handle> allreduce_mean(at::Tensor, const compression::Pipeline&, double,
                                                    at::Tensor) override {
    return done();
  }
  std::unique_ptr<transport::Handle> broadcast(int, at::Tensor, const compression::Pipeline&) override {
    return done();
  }
  std::unique_ptr<transport::Handle> allgather(std::vector<uint8_t>, std::vector<std::vector<uint8_t>>*) override {
    return done();
  }
  std::unique_ptr<transport::Group> subgroup(uint32_t, std::vector<int>) override {
    return std::make_unique<FaultyGroup>(self_, result_);
  }
  std::unique_ptr<transport::Handle> push(uint64_t, at::Tensor, const compression::Pipeline&, double,
                                          at::Tensor) override {
    return done();
  }
  std::unique_ptr<transport::Handle> pull(uint64_t, at::Tensor, const compression::Pipeline&) override {
    return done();
  }
  transport::ByteCounters bytes() const override { return {}; }
  int calls = 0;

 private:
  std::unique_ptr<transport::Handle> done() {
    ++calls;
    return std::make_unique<transport::DoneHandle>(result_);
  }
  int self_;
  transport::CollectiveResult result_;
};

class NoTime final : public TimeSource {
 public:
  double now_s() const override { return 0; }
  void sleep_until_s(double) override {}
};

transport::CollectiveResult timed_out() {
  return {Status(StatusCode::kTimeout, "no answer from island 0 within 3.0 s"), {}, 0};
}
transport::CollectiveResult everyone_lost() {
  return {Status(StatusCode::kPeerLost, "islands [0] left during collective #1"), {}, 0};
}

// One island (`self`) of a two-island run of `name`, wired to `group`.
struct Island {
  Island(const std::string& name, int self, transport::CollectiveResult result) : group(self, std::move(result)) {
    AlgorithmOptions o = testing::options_of(name, {{"inner_steps", 2},
                                                    {"fragments", 1},
                                                    {"overlap_steps", 0},
                                                    {"client_fraction", 1},
                                                    {"rounds", 1},
                                                    {"local_steps", 2}});
    o.islands = 2;
    o.train_steps = 4;
    o.shard_sizes = {1, 1};
    algorithm = make_algorithm(o, self);
    ctx.island = self;
    ctx.params = at::arange(4, at::kFloat);
    ctx.grads = at::ones({4});
    ctx.group = &group;
    ctx.codec = &codec;
    ctx.shard_size = 1;
    ctx.time = &time;
    algorithm->setup(ctx);
    (void)algorithm->planned_steps(4);
  }
  // Runs the hooks of inner steps 1..`steps` (no training: the parameters drift by hand).
  void run(int64_t steps) {
    for (int64_t s = 1; s <= steps; ++s) {
      algorithm->before_step(ctx, s);
      algorithm->after_backward(ctx, s);
      ctx.params.sub_(0.1);
      algorithm->after_inner_step(ctx, s);
    }
  }
  FaultyGroup group;
  compression::Pipeline codec;
  NoTime time;
  IslandContext ctx;
  std::unique_ptr<Algorithm> algorithm;
};

// The run ends with a StatusError (not a c10::Error from a TORCH_CHECK) whose Status is the
// transport's and whose what() is the documented line.
void expect_wan_failure(const std::string& name, transport::CollectiveResult result, int64_t steps,
                        const std::string& line) {
  SCOPED_TRACE(name);
  const StatusCode code = result.status.code();
  Island island(name, 1, std::move(result));
  try {
    island.run(steps);
    FAIL() << "no error";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), code);
    EXPECT_EQ(std::string(e.what()), line);
  }
}

TEST(WanOutcome, DdpTimeoutIsAStatusErrorNamingIslandExchangeAndStep) {
  expect_wan_failure("ddp", timed_out(), 1,
                     "island 1: ddp all-reduce at step 1: timeout: no answer from island 0 within 3.0 s");
}

TEST(WanOutcome, DiLoCoLosingEveryoneIsAStatusError) {
  expect_wan_failure("diloco", everyone_lost(), 2,
                     "island 1: diloco all-reduce at step 2: peer lost: islands [0] left during collective #1");
  expect_wan_failure("diloco", timed_out(), 2,
                     "island 1: diloco all-reduce at step 2: timeout: no answer from island 0 within 3.0 s");
}

TEST(WanOutcome, StreamingDiLoCoFedAvgAndAsyncLocalSgdToo) {
  expect_wan_failure("streaming_diloco", everyone_lost(), 2,
                     "island 1: streaming_diloco all-reduce at step 2: peer lost: islands [0] left during "
                     "collective #1");
  expect_wan_failure("fedavg", timed_out(), 1,
                     "island 1: fedavg pull at step 1: timeout: no answer from island 0 within 3.0 s");
  expect_wan_failure("async_local_sgd", timed_out(), 1,
                     "island 1: async_local_sgd pull at step 1: timeout: no answer from island 0 within 3.0 s");
}

// A member lost mid-collective with a survivor's data in the result: the survivors' average,
// and the run goes on (DDP too, as in the simulator).
TEST(WanOutcome, SurvivorsResultIsUsedByTheAllReduceAlgorithms) {
  for (const char* name : {"ddp", "diloco", "streaming_diloco"}) {
    SCOPED_TRACE(name);
    Island island(name, 1, {Status(StatusCode::kPeerLost, "islands [0] left during collective #1"), {1}, 1.0});
    EXPECT_NO_THROW(island.run(4));
    EXPECT_GT(island.group.calls, 0);
  }
}

// A push or pull has no survivors: any failure ends the run.
TEST(WanOutcome, ServerExchangesNeedOk) {
  expect_wan_failure("fedavg", {Status(StatusCode::kPeerLost, "the server is gone"), {1}, 1.0}, 1,
                     "island 1: fedavg pull at step 1: peer lost: the server is gone");
}

}  // namespace
}  // namespace atl::algorithms
