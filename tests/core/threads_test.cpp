// run.threads reaches every pool that computes: libtorch's intra-op threads and, when the
// selected libblas.so.3 is OpenBLAS, OpenBLAS's own pool (src/core/components.cpp).
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "src/core/components.h"

namespace {

TEST(ConfigureThreads, SizesLibtorchAndOpenBlas) {
  using GetThreads = int (*)();
  auto openblas = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  EXPECT_EQ(atl::core::configure_threads(1), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
  if (openblas) {
    EXPECT_EQ(openblas(), 1);
  }
  EXPECT_EQ(atl::core::configure_threads(2), 2);
  EXPECT_EQ(at::get_num_threads(), 2);
  if (openblas) {
    EXPECT_EQ(openblas(), 2);
  }
  if (!openblas) GTEST_SKIP() << "the selected libblas.so.3 is not OpenBLAS (scripts/setup.sh selects it)";
}

}  // namespace
