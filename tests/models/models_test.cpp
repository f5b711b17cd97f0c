// Models: the flat-buffer invariants (for every model), deterministic init, the GPT's shape
// (parameter count, causality, tying) and that both models can learn something small.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <set>

#include "src/base/status.h"
#include "src/models/convnet.h"
#include "src/models/flat_params.h"
#include "src/models/gpt.h"
#include "src/models/mlp.h"
#include "src/models/model.h"

namespace atl::models {
namespace {

const c10::Device kCpu(c10::kCPU);

config::ModelConfig tiny_gpt(bool tie = true) {
  config::ModelConfig c;
  c.name = "gpt";
  c.layers = 2;
  c.heads = 2;
  c.dim = 16;
  c.seq_len = 8;
  c.vocab = 11;
  c.dropout = 0.0;
  c.tie_embeddings = tie;
  return c;
}

config::ModelConfig tiny_mlp() {
  config::ModelConfig c;
  c.name = "mlp";
  c.hidden = {12, 10};
  return c;
}

const DataShape kMlpShape{0, 3, 6};  // vocab, classes, input_dim

data::Batch gpt_batch(const config::ModelConfig& c, int64_t batch, int64_t len, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto tokens = torch::randint(c.vocab, {batch, len + 1}, gen, torch::kLong);
  return {tokens.narrow(1, 0, len).contiguous(), tokens.narrow(1, 1, len).contiguous()};
}

data::Batch mlp_batch(int64_t batch, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({batch, kMlpShape.input_dim}, gen),
          torch::randint(kMlpShape.classes, {batch}, gen, torch::kLong)};
}

torch::nn::Module& module_of(Model& model) {
  if (auto* gpt = dynamic_cast<Gpt*>(&model)) return gpt->module();
  if (auto* conv = dynamic_cast<ConvNet*>(&model)) return conv->module();
  return dynamic_cast<Mlp&>(model).module();
}

config::ModelConfig image_model(const char* name) {
  config::ModelConfig c;
  c.name = name;
  return c;
}

// 12x12 images, 3 classes: the smallest lenet5 takes.
const DataShape kImageShape{0, 3, 144};
data::Batch image_batch(int64_t batch, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({batch, kImageShape.input_dim}, gen), torch::randint(kImageShape.classes, {batch}, gen, torch::kLong)};
}

bool inside(const torch::Tensor& buffer, const torch::Tensor& t) {
  auto* lo = static_cast<const char*>(buffer.data_ptr());
  auto* hi = lo + buffer.numel() * buffer.element_size();
  auto* p = static_cast<const char*>(t.data_ptr());
  return p >= lo && p + t.numel() * t.element_size() <= hi;
}

// ---- flat-buffer invariants, for every model ------------------------------------------------

struct Case {
  const char* label;
  config::ModelConfig config;
  DataShape shape;
  data::Batch (*batch)();
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

std::vector<Case> cases() {
  return {
      {"gpt_tied", tiny_gpt(true), DataShape{11, 0, 0},
       [] { return gpt_batch(tiny_gpt(), 3, 8, 7); }},
      {"gpt_untied", tiny_gpt(false), DataShape{11, 0, 0},
       [] { return gpt_batch(tiny_gpt(), 3, 8, 7); }},
      {"mlp", tiny_mlp(), kMlpShape, [] { return mlp_batch(5, 7); }},
      {"cnn", image_model("cnn"), kImageShape, [] { return image_batch(4, 7); }},
      {"lenet5", image_model("lenet5"), kImageShape, [] { return image_batch(4, 7); }},
  };
}

class FlatBufferTest : public testing::TestWithParam<Case> {};

TEST_P(FlatBufferTest, LayoutCoversTheBufferExactly) {
  auto model = make_model(GetParam().config, GetParam().shape, kCpu, 1);
  const auto& p = model->params();
  EXPECT_EQ(p.dim(), 1);
  EXPECT_TRUE(p.is_contiguous());
  EXPECT_EQ(p.scalar_type(), torch::kFloat);
  EXPECT_FALSE(p.requires_grad());
  EXPECT_EQ(model->grads().sizes(), p.sizes());
  EXPECT_TRUE(model->grads().is_contiguous());
  EXPECT_EQ(model->grads().abs().sum().item<float>(), 0.0f);

  int64_t offset = 0;
  std::set<std::string> names;
  for (const auto& slice : model->layout()) {
    EXPECT_EQ(slice.offset, offset) << slice.name;
    int64_t n = 1;
    for (auto d : slice.shape) n *= d;
    EXPECT_EQ(slice.numel, n) << slice.name;
    EXPECT_TRUE(names.insert(slice.name).second) << "duplicate " << slice.name;
    offset += slice.numel;
  }
  EXPECT_EQ(offset, model->numel());
}

TEST_P(FlatBufferTest, EveryParameterAndGradIsAViewOfTheFlatBuffers) {
  auto model = make_model(GetParam().config, GetParam().shape, kCpu, 1);
  auto named = module_of(*model).named_parameters();
  ASSERT_EQ(named.size(), model->layout().size());
  const float* base = model->params().data_ptr<float>();
  const float* gbase = model->grads().data_ptr<float>();
  for (const auto& slice : model->layout()) {
    const torch::Tensor& param = named[slice.name];
    EXPECT_EQ(param.data_ptr<float>(), base + slice.offset) << slice.name;
    EXPECT_EQ(param.sizes().vec(), slice.shape) << slice.name;
    ASSERT_TRUE(param.grad().defined()) << slice.name;
    EXPECT_EQ(param.grad().data_ptr<float>(), gbase + slice.offset) << slice.name;
    EXPECT_TRUE(inside(model->params(), param));
  }
}

TEST_P(FlatBufferTest, WritingParamsChangesTheForwardPass) {
  auto model = make_model(GetParam().config, GetParam().shape, kCpu, 1);
  auto batch = GetParam().batch();
  torch::NoGradGuard no_grad;
  float before = model->forward(batch).loss.item<float>();
  model->params().mul_(3.0);
  float after = model->forward(batch).loss.item<float>();
  EXPECT_NE(before, after);
  model->params().div_(3.0);
  EXPECT_NEAR(model->forward(batch).loss.item<float>(), before, 1e-5);
}

TEST_P(FlatBufferTest, BackwardFillsAndAccumulatesIntoGrads) {
  auto model = make_model(GetParam().config, GetParam().shape, kCpu, 1);
  auto batch = GetParam().batch();
  auto& module = module_of(*model);
  auto params = module.parameters();

  // Reference: autograd.grad returns fresh tensors and leaves .grad alone.
  auto ref_loss = model->forward(batch).loss;
  auto ref = torch::autograd::grad({ref_loss}, params);
  std::vector<torch::Tensor> flat_ref;
  for (auto& g : ref) flat_ref.push_back(g.reshape(-1));
  auto expected = torch::cat(flat_ref);
  EXPECT_EQ(model->grads().abs().sum().item<float>(), 0.0f);

  model->forward(batch).loss.backward();
  EXPECT_TRUE(torch::allclose(model->grads(), expected, 1e-5, 1e-6));
  EXPECT_GT(model->grads().abs().sum().item<float>(), 0.0f);
  for (auto& p : params) EXPECT_TRUE(inside(model->grads(), p.grad()));

  model->forward(batch).loss.backward();  // accumulates
  EXPECT_TRUE(torch::allclose(model->grads(), 2 * expected, 1e-5, 1e-6));
  for (auto& p : params) EXPECT_TRUE(inside(model->grads(), p.grad()));

  model->grads().zero_();  // the caller's way to reset
  model->forward(batch).loss.backward();
  EXPECT_TRUE(torch::allclose(model->grads(), expected, 1e-5, 1e-6));
}

TEST_P(FlatBufferTest, SameSeedIsBitwiseIdenticalOtherSeedIsNot) {
  auto a = make_model(GetParam().config, GetParam().shape, kCpu, 42);
  auto b = make_model(GetParam().config, GetParam().shape, kCpu, 42);
  auto c = make_model(GetParam().config, GetParam().shape, kCpu, 43);
  EXPECT_TRUE(torch::equal(a->params(), b->params()));
  EXPECT_FALSE(torch::equal(a->params(), c->params()));
}

TEST_P(FlatBufferTest, InitLeavesTheGlobalGeneratorAlone) {
  torch::manual_seed(5);
  auto expected = torch::randn({4});
  torch::manual_seed(5);
  auto model = make_model(GetParam().config, GetParam().shape, kCpu, 1);
  EXPECT_TRUE(torch::equal(torch::randn({4}), expected));
}

INSTANTIATE_TEST_SUITE_P(Models, FlatBufferTest, testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(FlatParams, BlockIndexParsesBlockNames) {
  EXPECT_EQ(block_index("blocks.0.attn.qkv.weight"), 0);
  EXPECT_EQ(block_index("blocks.12.ln1.bias"), 12);
  EXPECT_EQ(block_index("tok_emb.weight"), -1);
  EXPECT_EQ(block_index("blocks.x.weight"), -1);
  EXPECT_EQ(block_index("blocks."), -1);
}

// ---- GPT ---------------------------------------------------------------------------------------

TEST(Gpt, ParameterCountMatchesTheFormula) {
  for (bool tie : {true, false}) {
    auto c = tiny_gpt(tie);
    Gpt model(c, kCpu, 0);
    // V C + T C + L (12 C^2 + 13 C) + 2 C (+ V C untied), written out for V=11 T=8 C=16 L=2.
    int64_t by_hand =
        11 * 16 + 8 * 16 + 2 * (12 * 16 * 16 + 13 * 16) + 2 * 16 + (tie ? 0 : 11 * 16);
    EXPECT_EQ(model.numel(), by_hand);
    EXPECT_EQ(Gpt::expected_numel(c), by_hand);
  }
}

TEST(Gpt, LayoutNamesBlocksAndTying) {
  Gpt tied(tiny_gpt(true), kCpu, 0);
  Gpt untied(tiny_gpt(false), kCpu, 0);
  auto names = [](const Model& m) {
    std::map<std::string, int> out;
    for (const auto& s : m.layout()) out[s.name] = s.block;
    return out;
  };
  auto t = names(tied), u = names(untied);
  EXPECT_EQ(t.count("head.weight"), 0u);
  EXPECT_EQ(u.count("head.weight"), 1u);
  EXPECT_EQ(t.at("tok_emb.weight"), -1);
  EXPECT_EQ(t.at("ln_f.weight"), -1);
  EXPECT_EQ(t.at("blocks.0.attn.qkv.weight"), 0);
  EXPECT_EQ(t.at("blocks.1.mlp.proj.bias"), 1);
  EXPECT_EQ(t.size(), 2 + 2 * 12 + 2u);
}

TEST(Gpt, TiedHeadIsTheTokenEmbedding) {
  // logits = ln_f(x) @ head^T: zeroing tok_emb in the flat buffer zeroes the logits only
  // when the head reads the same storage.
  for (bool tie : {true, false}) {
    auto c = tiny_gpt(tie);
    Gpt model(c, kCpu, 0);
    const auto& slice = model.layout().front();
    ASSERT_EQ(slice.name, "tok_emb.weight");
    model.params().narrow(0, slice.offset, slice.numel).zero_();
    torch::NoGradGuard no_grad;
    float max = model.logits(gpt_batch(c, 2, 8, 1).input).abs().max().item<float>();
    if (tie) {
      EXPECT_EQ(max, 0.0f);
    } else {
      EXPECT_GT(max, 0.0f);
    }
  }
}

TEST(Gpt, InitFollowsNanoGpt) {
  config::ModelConfig c = tiny_gpt();
  c.dim = 64;
  c.layers = 4;
  Gpt model(c, kCpu, 3);
  auto named = model.module().named_parameters();
  auto std_of = [&](const std::string& n) { return named[n].std().item<double>(); };
  EXPECT_NEAR(std_of("blocks.0.attn.qkv.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("blocks.0.mlp.fc.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("blocks.3.attn.proj.weight"), 0.02 / std::sqrt(8.0), 0.001);
  EXPECT_NEAR(std_of("blocks.3.mlp.proj.weight"), 0.02 / std::sqrt(8.0), 0.001);
  EXPECT_EQ(named["blocks.1.attn.qkv.bias"].abs().max().item<float>(), 0.0f);
  EXPECT_EQ(named["blocks.1.ln2.weight"].min().item<float>(), 1.0f);
  EXPECT_EQ(named["blocks.1.ln2.weight"].max().item<float>(), 1.0f);
}

TEST(Gpt, InitialLossIsAboutLogVocab) {
  auto c = tiny_gpt();
  Gpt model(c, kCpu, 0);
  auto out = model.forward(gpt_batch(c, 4, 8, 1));
  EXPECT_NEAR(out.loss.item<double>(), std::log(11.0), 0.1);
  EXPECT_EQ(out.count, 4 * 8);
  EXPECT_EQ(out.correct, 0);
}

TEST(Gpt, IsCausal) {
  auto c = tiny_gpt();
  Gpt model(c, kCpu, 0);
  torch::NoGradGuard no_grad;
  auto tokens = gpt_batch(c, 2, 8, 3).input;
  auto base = model.logits(tokens);
  for (int64_t t = 0; t < 8; ++t) {
    auto changed = tokens.clone();
    changed.select(1, t).add_(1).remainder_(c.vocab);
    auto logits = model.logits(changed);
    if (t > 0) {
      EXPECT_TRUE(torch::equal(logits.narrow(1, 0, t), base.narrow(1, 0, t))) << "t=" << t;
    }
    EXPECT_FALSE(torch::allclose(logits.narrow(1, t, 1), base.narrow(1, t, 1))) << "t=" << t;
  }
}

TEST(Gpt, ShorterInputsAreAPrefixOfTheFullOne) {
  auto c = tiny_gpt();
  Gpt model(c, kCpu, 0);
  torch::NoGradGuard no_grad;
  auto tokens = gpt_batch(c, 2, 8, 3).input;
  auto full = model.logits(tokens);
  auto part = model.logits(tokens.narrow(1, 0, 5));
  EXPECT_EQ(part.sizes(), (std::vector<int64_t>{2, 5, 11}));
  EXPECT_TRUE(torch::allclose(part, full.narrow(1, 0, 5), 1e-5, 1e-6));
  EXPECT_THROW(model.logits(torch::zeros({1, 9}, torch::kLong)), c10::Error);
}

TEST(Gpt, DropoutOnlyInTraining) {
  auto c = tiny_gpt();
  c.dropout = 0.5;
  Gpt model(c, kCpu, 0);
  auto batch = gpt_batch(c, 2, 8, 3);
  torch::NoGradGuard no_grad;
  model.set_training(false);
  EXPECT_TRUE(torch::equal(model.logits(batch.input), model.logits(batch.input)));
  model.set_training(true);
  EXPECT_FALSE(torch::equal(model.logits(batch.input), model.logits(batch.input)));
}

TEST(Gpt, FlopsPerToken) {
  auto c = tiny_gpt(true);
  Gpt tied(c, kCpu, 0);
  double n = static_cast<double>(tied.numel() - 8 * 16);  // minus pos_emb
  EXPECT_DOUBLE_EQ(tied.flops_per_example(), 6 * n + 12.0 * 2 * 8 * 16);
  Gpt untied(tiny_gpt(false), kCpu, 0);
  EXPECT_DOUBLE_EQ(untied.flops_per_example(), tied.flops_per_example());  // lookup is free
}

// AdamW on the flat buffers, as the trainer does it.
struct FlatAdam {
  torch::Tensor m, v;
  int64_t step = 0;
  void update(Model& model, double lr) {
    torch::NoGradGuard no_grad;
    if (!m.defined()) {
      m = torch::zeros_like(model.params());
      v = torch::zeros_like(model.params());
    }
    ++step;
    const double b1 = 0.9, b2 = 0.99;
    auto& g = model.grads();
    m.mul_(b1).add_(g, 1 - b1);
    v.mul_(b2).addcmul_(g, g, 1 - b2);
    double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    model.params().addcdiv_(m, (v / bc2).sqrt().add_(1e-8), -lr / bc1);
  }
};

TEST(Gpt, LearnsARepeatedSequence) {
  config::ModelConfig c = tiny_gpt();
  c.vocab = 16;
  c.seq_len = 16;
  c.dim = 32;
  auto model = make_model(c, DataShape{16, 0, 0}, kCpu, 0);
  // "0 1 2 ... 15 0 1 ..." from random offsets: predictable after the first token.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  auto make_batch = [&] {
    auto start = torch::randint(16, {8, 1}, gen, torch::kLong);
    auto seq = (start + torch::arange(17, torch::kLong)).remainder(16);
    return data::Batch{seq.narrow(1, 0, 16).contiguous(), seq.narrow(1, 1, 16).contiguous()};
  };
  FlatAdam adam;
  float first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    model->grads().zero_();
    auto out = model->forward(make_batch());
    out.loss.backward();
    adam.update(*model, 1e-2);
    if (step == 0) first = out.loss.item<float>();
    last = out.loss.item<float>();
  }
  EXPECT_GT(first, 2.5f);
  EXPECT_LT(last, 0.1f) << "first " << first;
}

// ---- MLP ---------------------------------------------------------------------------------------

TEST(Mlp, SizesComeFromConfigOrData) {
  auto c = tiny_mlp();
  auto from_data = make_model(c, kMlpShape, kCpu, 0);
  EXPECT_EQ(from_data->numel(), 6 * 12 + 12 + 12 * 10 + 10 + 10 * 3 + 3);
  c.input_dim = 6;
  c.classes = 3;
  EXPECT_EQ(make_model(c, DataShape{}, kCpu, 0)->numel(), from_data->numel());
  EXPECT_DOUBLE_EQ(from_data->flops_per_example(), 6.0 * from_data->numel());
  EXPECT_THROW(make_model(tiny_mlp(), DataShape{}, kCpu, 0), UserError);
  c.classes = 4;
  EXPECT_THROW(make_model(c, kMlpShape, kCpu, 0), UserError);  // disagrees with the data
}

TEST(Mlp, LearnsSeparableClusters) {
  // Four Gaussian clusters around distinct centres in 6-D.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto centres = torch::randn({3, 6}, gen) * 3;
  auto sample = [&](int64_t n) {
    auto labels = torch::randint(3, {n}, gen, torch::kLong);
    auto x = centres.index_select(0, labels) + torch::randn({n, 6}, gen);
    return data::Batch{x, labels};
  };
  auto model = make_model(tiny_mlp(), kMlpShape, kCpu, 0);
  for (int step = 0; step < 200; ++step) {
    model->grads().zero_();
    model->forward(sample(32)).loss.backward();
    torch::NoGradGuard no_grad;
    model->params().add_(model->grads(), -0.1);
  }
  model->set_training(false);
  torch::NoGradGuard no_grad;
  auto out = model->forward(sample(1000));
  EXPECT_EQ(out.count, 1000);
  EXPECT_GT(out.correct, 900);
}

// ---- registry ----------------------------------------------------------------------------------

TEST(Registry, ListsNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(model_names(), (std::vector<std::string>{"gpt", "mlp", "cnn", "lenet5"}));
  config::ModelConfig c;
  c.name = "resnet";
  try {
    make_model(c, DataShape{}, kCpu, 0);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("resnet"), std::string::npos) << what;
    EXPECT_NE(what.find("gpt"), std::string::npos) << what;
    EXPECT_NE(what.find("mlp"), std::string::npos) << what;
    EXPECT_NE(what.find("lenet5"), std::string::npos) << what;
  }
}

// model_blocks: what the built model's layout numbers as blocks (ParamSlice::block), from the
// config alone.
TEST(Registry, BlocksAreThoseTheBuiltModelNumbers) {
  EXPECT_EQ(block_model_names(), (std::vector<std::string>{"gpt"}));
  auto gpt = tiny_gpt();
  gpt.layers = 3;
  config::ModelConfig mlp;
  mlp.name = "mlp";
  mlp.hidden = {8};
  config::ModelConfig unknown;
  unknown.name = "resnet";
  EXPECT_EQ(model_blocks(unknown), 0);
  for (const auto& c : {gpt, mlp}) {
    SCOPED_TRACE(c.name);
    const auto model = make_model(c, DataShape{0, 3, 4}, kCpu, 0);
    int blocks = 0;
    for (const ParamSlice& s : model->layout()) blocks = std::max(blocks, s.block + 1);
    EXPECT_EQ(model_blocks(c), blocks);
    EXPECT_EQ(estimate_numel(c, DataShape{0, 3, 4}), model->numel());
  }
}

TEST(Registry, RejectsInconsistentGptSizes) {
  auto c = tiny_gpt();
  c.heads = 3;  // 16 % 3 != 0
  EXPECT_THROW(make_model(c, DataShape{}, kCpu, 0), UserError);
  c = tiny_gpt();
  EXPECT_THROW(make_model(c, DataShape{256, 0, 0}, kCpu, 0), UserError);  // data vocab too big
  EXPECT_NO_THROW(make_model(c, DataShape{}, kCpu, 0));
}

}  // namespace
}  // namespace atl::models
