#include "transport/tensor_pool.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace atl::transport {
namespace {

TEST(TensorPool, ReusesAGivenBackTensorOfTheSameSize) {
  TensorPool pool(2);
  at::Tensor t = pool.take(16);
  ASSERT_EQ(t.numel(), 16);
  ASSERT_EQ(t.scalar_type(), at::kFloat);
  const void* storage = t.data_ptr();
  pool.give(std::move(t));
  EXPECT_NE(pool.take(8).data_ptr(), storage);  // another size: a new tensor
  EXPECT_EQ(pool.take(16).data_ptr(), storage);
}

// A zero-copy send (or a kept result) still reads the tensor: the pool must not hand it out
// again to be overwritten.
TEST(TensorPool, RefusesATensorSomethingElseStillHolds) {
  TensorPool pool(2);
  at::Tensor t = pool.take(16);
  at::Tensor still_sending = t;
  const void* storage = t.data_ptr();
  pool.give(std::move(t));
  at::Tensor next = pool.take(16);
  EXPECT_NE(next.data_ptr(), storage);
  // Once released, the same memory may come back.
  pool.give(std::move(still_sending));
  EXPECT_EQ(pool.take(16).data_ptr(), storage);
}

TEST(TensorPool, KeepsAtMostItsBoundDroppingTheOldest) {
  TensorPool pool(2);
  at::Tensor a = pool.take(4), b = pool.take(4), c = pool.take(4);
  const void* pb = b.data_ptr();
  const void* pc = c.data_ptr();
  pool.give(std::move(a));
  pool.give(std::move(b));
  pool.give(std::move(c));  // a is dropped
  const void* first = pool.take(4).data_ptr();
  const void* second = pool.take(4).data_ptr();
  EXPECT_EQ(first, pb);
  EXPECT_EQ(second, pc);
}

}  // namespace
}  // namespace atl::transport
