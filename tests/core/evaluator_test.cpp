// Evaluator over the whole validation split: every example counts once, whatever the batch
// size (the last batch is short), and a short batch weighs what it holds.
#include "src/core/evaluator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "src/data/dataset.h"

namespace atl::core {
namespace {

config::DataConfig synthetic(int examples) {
  config::DataConfig c;
  c.kind = "synthetic";
  c.synthetic_examples = examples;
  c.synthetic_dim = 6;
  c.synthetic_classes = 3;
  c.val_fraction = 0.0;
  return c;
}

EvalResult evaluate(const data::Dataset& val, int batch_size, int max_batches) {
  config::ModelConfig m;
  m.name = "mlp";
  m.hidden = {8};
  const models::DataShape shape{0, val.num_classes(), val.input_dim()};
  Evaluator e(models::make_model(m, shape, c10::Device("cpu"), 3),
              data::validation_batches(val, batch_size, max_batches, 11), true);
  auto params = models::make_model(m, shape, c10::Device("cpu"), 3)->params().clone();
  return e.evaluate(params);
}

// 103 examples at batch 10: 11 batches, the last of 3. The result equals one batch of all 103.
TEST(Evaluator, WholeSplitCountsEveryExampleWithAShortLastBatch) {
  const data::Splits s = data::load_splits(synthetic(103), 0, 1);
  ASSERT_EQ(s.train->size(), 103);
  const EvalResult batched = evaluate(*s.train, 10, 0);
  const EvalResult whole = evaluate(*s.train, 200, 0);  // one batch of all 103
  EXPECT_EQ(batched.count, 103);
  EXPECT_EQ(whole.count, 103);
  EXPECT_NEAR(batched.loss, whole.loss, 1e-6 * std::fabs(whole.loss));
  EXPECT_DOUBLE_EQ(batched.accuracy, whole.accuracy);
  const double correct = batched.accuracy * 103;
  EXPECT_NEAR(correct, std::round(correct), 1e-9);  // a count of examples out of 103

  // A bounded evaluation still stops at eval_batches full batches.
  const EvalResult bounded = evaluate(*s.train, 10, 4);
  EXPECT_EQ(bounded.count, 40);
}

}  // namespace
}  // namespace atl::core
