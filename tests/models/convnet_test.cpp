// The papers' image classifiers (src/models/convnet.h): their parameter counts (the FedAvg
// paper's 1,663,370 for its CNN), and their loss and gradient against PyTorch's own Conv2d,
// MaxPool2d and Linear with the same parameters (python3-torch, Debian's libtorch's Python
// side), for a batch of random images.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <yaml-cpp/yaml.h>

#include <cmath>

#include "src/base/status.h"
#include "src/models/convnet.h"
#include "src/models/model.h"

namespace atl::models {
namespace {

namespace fs = std::filesystem;

config::ModelConfig named(const char* name) {
  config::ModelConfig c;
  c.name = name;
  return c;
}

const DataShape kMnist{0, 10, 784};  // vocab, classes, input_dim

TEST(ConvNet, ParameterCountsAreThePapers) {
  EXPECT_EQ(ConvNet::expected_numel(ConvNet::Kind::kCnn, 28, 10), 1663370);  // McMahan et al., section 3
  EXPECT_EQ(ConvNet::expected_numel(ConvNet::Kind::kLenet5, 28, 10), 61706);
  for (const char* name : {"cnn", "lenet5"}) {
    auto model = make_model(named(name), kMnist, c10::Device(c10::kCPU), 1);
    EXPECT_EQ(model->numel(), estimate_numel(named(name), kMnist)) << name;
    EXPECT_EQ(model->name(), name);
  }
  auto cnn = make_model(named("cnn"), kMnist, c10::Device(c10::kCPU), 1);
  std::vector<std::string> names;
  for (const auto& s : cnn->layout()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                             "fc1.bias", "out.weight", "out.bias"}));
}

TEST(ConvNet, ImagesThatAreNotSquareAreRefusedNamingTheKey) {
  auto p = check_model(named("cnn"), DataShape{0, 3, 10}, true);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->key, "model.name");
  EXPECT_NE(p->message.find("square single-channel images of at least 4x4 pixels, but the data has 10 features"),
            std::string::npos) << p->message;
  p = check_model(named("lenet5"), DataShape{0, 3, 64}, true);  // 8x8: too small to pool twice after a valid 5x5
  ASSERT_TRUE(p.has_value());
  EXPECT_NE(p->message.find("at least 12x12"), std::string::npos) << p->message;
  EXPECT_FALSE(check_model(named("lenet5"), DataShape{0, 3, 144}, true).has_value());
}

// The Python side: the architecture from torch.nn as tests/models/make_convnet_reference.py
// builds it (imported from argv[6]), the flat parameters loaded in the layout's order, the
// loss and the flat gradient written back.
const char* kReference = R"py(
import struct, sys, torch, torch.nn.functional as F
kind, side, classes, batch, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
sys.dont_write_bytecode = True  # leave the source tree as it is
sys.path.insert(0, sys.argv[6])
from make_convnet_reference import build, logits_of
def floats(name):
    return torch.frombuffer(bytearray(open(path + name, 'rb').read()), dtype=torch.float32)
layers, fcs, out = build(kind, side, classes)
params = [p for m in layers + fcs + [out] for p in (m.weight, m.bias)]
flat, at = floats('.params'), 0
with torch.no_grad():
    for p in params:
        p.copy_(flat[at:at + p.numel()].view_as(p))
        at += p.numel()
assert at == flat.numel(), (at, flat.numel())
target = floats('.target').long()
loss = F.cross_entropy(logits_of(layers, fcs, out, floats('.input').view(batch, 1, side, side)), target)
loss.backward()
g = torch.cat([p.grad.reshape(-1) for p in params]).tolist()
open(path + '.grads', 'wb').write(struct.pack('<%df' % len(g), *g))
open(path + '.loss', 'w').write(repr(loss.item()))
)py";

std::string python_with_torch() {
  for (const char* candidate : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(candidate) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) return candidate;
  return "";
}

TEST(ConvNet, LossAndGradientAreThoseOfPyTorch) {
  const std::string python = python_with_torch();
  if (python.empty()) GTEST_SKIP() << "python3-torch is not installed (scripts/setup.sh installs it)";
  const fs::path dir = fs::temp_directory_path() / ("atoll_convnet_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "reference.py") << kReference;
  for (const char* name : {"cnn", "lenet5"}) {
    SCOPED_TRACE(name);
    auto model = make_model(named(name), kMnist, c10::Device(c10::kCPU), 7);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    data::Batch batch{torch::randn({6, 784}, gen), torch::randint(10, {6}, gen, torch::kLong)};
    model->set_training(true);
    model->grads().zero_();
    Output out = model->forward(batch);
    out.loss.backward();
    const std::string file = (dir / name).string();
    auto write = [&](const std::string& suffix, const at::Tensor& t) {
      const at::Tensor f = t.to(torch::kFloat).contiguous();
      std::ofstream(file + suffix, std::ios::binary).write(static_cast<const char*>(f.data_ptr()), f.nbytes());
    };
    write(".params", model->params());
    write(".input", batch.input);
    write(".target", batch.target);
    const std::string cmd = python + " " + (dir / "reference.py").string() + " " + name + " 28 10 6 " + file + " " + ATOLL_SOURCE_DIR + "/tests/models";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream g(file + ".grads", std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.size(), static_cast<size_t>(model->numel()) * 4);
    const at::Tensor grads = torch::from_blob(bytes.data(), {model->numel()}, torch::kFloat).clone();
    double reference_loss = 0;
    std::ifstream(file + ".loss") >> reference_loss;
    const at::Tensor loss = torch::full({1}, reference_loss, torch::kDouble);
    EXPECT_NEAR(out.loss.item<double>(), loss.item<double>(), 1e-6 * std::abs(loss.item<double>()));
    ASSERT_EQ(grads.numel(), model->numel());
    EXPECT_TRUE(at::allclose(model->grads(), grads, 1e-4, 1e-6))
        << "max difference " << (model->grads() - grads).abs().max().item<double>();
    EXPECT_GT(grads.abs().sum().item<double>(), 0.0);
  }
  fs::remove_all(dir);
}

// Against PyTorch's numbers computed once and stored in tests/models/convnet_reference.json
// (tests/models/make_convnet_reference.py says how; it needs python3-torch, this test does
// not): fixed parameters and images from sin/cos formulas both sides evaluate alike, then the
// logits, the loss, and each parameter tensor's gradient (its sum of squares and 16 values),
// all within 1e-5 (relative where the value exceeds 1).
TEST(ConvNet, MatchesTheStoredPyTorchReference) {
  const YAML::Node ref = YAML::LoadFile(std::string(ATOLL_SOURCE_DIR) + "/tests/models/convnet_reference.json");
  const int64_t batch = ref["batch"].as<int64_t>(), side = ref["side"].as<int64_t>();
  const int64_t classes = ref["classes"].as<int64_t>();
  std::vector<float> pixels(static_cast<size_t>(batch * side * side));
  for (size_t j = 0; j < pixels.size(); ++j) pixels[j] = static_cast<float>(std::cos(0.013 * static_cast<double>(j)));
  std::vector<int64_t> labels;
  for (int64_t b = 0; b < batch; ++b) labels.push_back((3 * b + 1) % classes);
  const data::Batch input{torch::from_blob(pixels.data(), {batch, side * side}, torch::kFloat).clone(),
                          torch::tensor(labels, torch::kLong)};
  auto near = [](double got, double want) { return std::abs(got - want) <= 1e-5 * std::max(1.0, std::abs(want)); };
  for (const char* name : {"cnn", "lenet5"}) {
    SCOPED_TRACE(name);
    const YAML::Node m = ref["models"][name];
    auto model = make_model(named(name), DataShape{0, static_cast<int>(classes), side * side}, c10::Device(c10::kCPU), 1);
    ASSERT_EQ(model->numel(), m["numel"].as<int64_t>());
    // Parameter i of the flat buffer: 2 sin(0.37 i + 0.1) / sqrt(fan-in of its layer).
    std::vector<float> values(static_cast<size_t>(model->numel()));
    int64_t fan_in = 1;
    for (const auto& slice : model->layout()) {
      if (slice.shape.size() > 1) {
        fan_in = 1;
        for (size_t d = 1; d < slice.shape.size(); ++d) fan_in *= slice.shape[d];
      }
      for (int64_t i = slice.offset; i < slice.offset + slice.numel; ++i)
        values[static_cast<size_t>(i)] =
            static_cast<float>(2.0 * std::sin(0.37 * static_cast<double>(i) + 0.1) / std::sqrt(static_cast<double>(fan_in)));
    }
    {
      torch::NoGradGuard no_grad;
      model->params().copy_(torch::from_blob(values.data(), {model->numel()}, torch::kFloat));
    }
    model->set_training(true);
    model->grads().zero_();
    Output out = model->forward(input);
    out.loss.backward();
    EXPECT_TRUE(near(out.loss.item<double>(), m["loss"].as<double>()))
        << out.loss.item<double>() << " vs " << m["loss"].as<double>();
    at::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = dynamic_cast<ConvNet&>(*model).logits(input.input).reshape(-1).to(torch::kDouble).contiguous();
    }
    const auto want_logits = m["logits"].as<std::vector<double>>();
    ASSERT_EQ(logits.numel(), static_cast<int64_t>(want_logits.size()));
    for (size_t k = 0; k < want_logits.size(); ++k)
      EXPECT_TRUE(near(logits[static_cast<int64_t>(k)].item<double>(), want_logits[k])) << "logit " << k;
    ASSERT_EQ(model->layout().size(), m["tensors"].size());
    for (size_t t = 0; t < model->layout().size(); ++t) {
      const auto& slice = model->layout()[t];
      const YAML::Node r = m["tensors"][t];
      ASSERT_EQ(slice.numel, r["numel"].as<int64_t>()) << slice.name;
      const at::Tensor g = model->grads().narrow(0, slice.offset, slice.numel).to(torch::kDouble);
      EXPECT_TRUE(near(g.pow(2).sum().item<double>(), r["grad_sumsq"].as<double>()))
          << slice.name << ": " << g.pow(2).sum().item<double>() << " vs " << r["grad_sumsq"].as<double>();
      const auto picks = r["picks"].as<std::vector<int64_t>>();
      const auto at = r["grad_at"].as<std::vector<double>>();
      for (size_t k = 0; k < picks.size(); ++k)
        EXPECT_TRUE(near(g[picks[k]].item<double>(), at[k])) << slice.name << "[" << picks[k] << "]";
    }
  }
}

}  // namespace
}  // namespace atl::models
