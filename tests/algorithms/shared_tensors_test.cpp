// SharedTensors: equal state held once, private copies before writes, nothing kept that no
// island holds (algorithms/shared_tensors.h).
#include "algorithms/shared_tensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "algorithms/outer_optimizer.h"

namespace atl::algorithms {
namespace {

TEST(SharedTensors, EqualTensorsAreHeldOnceAndWritesGoToAPrivateCopy) {
  SharedTensors shared;
  at::Tensor a = shared.share(at::arange(100000, at::kFloat));
  at::Tensor b = shared.share(at::arange(100000, at::kFloat));  // another island's equal state
  EXPECT_TRUE(a.is_same(b));
  EXPECT_EQ(shared.held(), 1u);
  at::Tensor c = at::arange(100000, at::kFloat);
  c[99999] = -1;  // differs in one value the hash does not sample
  c = shared.share(c);
  EXPECT_FALSE(c.is_same(a));
  EXPECT_EQ(shared.held(), 2u);
  // -0.0 and 0.0 compare equal as numbers but are different bits: not the same state.
  at::Tensor z = shared.share(at::zeros({8})), nz = shared.share(at::full({8}, -0.0f));
  EXPECT_FALSE(z.is_same(nz));

  at::Tensor before = b;
  shared.writable(b);  // b came from share(): a private copy
  EXPECT_FALSE(b.is_same(a));
  b.add_(1);
  EXPECT_TRUE(at::equal(a, at::arange(100000, at::kFloat))) << "a write through one island reached another";
  at::Tensor mine = at::ones({4});
  at::Tensor same = mine;
  shared.writable(mine);  // never shared: left as it is
  EXPECT_TRUE(mine.is_same(same));

  a.reset();
  before.reset();
  c.reset();
  z.reset();
  nz.reset();
  EXPECT_EQ(shared.held(), 0u) << "a tensor no island holds is still kept";
}

// Two islands' outer optimizers stepping on equal inputs end with one momentum buffer, and
// stay bitwise those of an optimizer that shares nothing.
TEST(SharedTensors, OuterOptimizersInStepShareTheirMomentum) {
  OuterOptimizerOptions o;
  SharedTensors shared;
  OuterOptimizer one(o), two(o), alone(o);
  one.place(&shared, nullptr);
  two.place(&shared, nullptr);
  at::Tensor t1 = at::randn({5000}), t2 = t1.clone(), t3 = t1.clone();
  for (int r = 0; r < 3; ++r) {
    const at::Tensor delta = at::randn({5000});
    one.step(t1, delta);
    two.step(t2, delta);
    alone.step(t3, delta);
    EXPECT_TRUE(one.momentum().is_same(two.momentum()));
    EXPECT_TRUE(at::equal(one.momentum(), alone.momentum()));
    EXPECT_TRUE(at::equal(t1, t3));
    EXPECT_TRUE(at::equal(t2, t3));
  }
}

}  // namespace
}  // namespace atl::algorithms
