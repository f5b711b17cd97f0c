// The model registry: every model atoll can build, by the name `model.name` gives.
#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/models/convnet.h"
#include "src/models/gpt.h"
#include "src/models/mlp.h"
#include "src/models/model.h"

namespace atl::models {

namespace {

std::string joined_names() {
  std::string out;
  for (const auto& name : model_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Data-derived size: the config value when set, else the data's; both set must agree.
// `value` is the result (0 when the data does not say and `known` is false).
std::optional<KeyProblem> resolve(const char* key, int64_t from_config, int64_t from_data,
                                  const char* what, bool known, int64_t& value) {
  const std::string k = std::string("model.") + key;
  if (from_config < 0) return KeyProblem{k, "must be >= 0, got " + std::to_string(from_config)};
  if (from_config > 0 && from_data > 0 && from_config != from_data) {
    return KeyProblem{k, "is " + std::to_string(from_config) + " but the data set has " +
                             std::to_string(from_data) + " " + what};
  }
  value = from_config > 0 ? from_config : from_data;
  if (value == 0 && known)
    return KeyProblem{k, "is unknown: set " + k + " or use a classification data set"};
  return std::nullopt;
}

std::optional<KeyProblem> check_gpt(const config::ModelConfig& c, const DataShape& shape) {
  auto positive = [](const char* key, int value) -> std::optional<KeyProblem> {
    if (value <= 0) return KeyProblem{std::string("model.") + key, "must be > 0, got " + std::to_string(value)};
    return std::nullopt;
  };
  for (auto [key, value] : {std::pair{"layers", c.layers}, {"heads", c.heads}, {"dim", c.dim},
                            {"seq_len", c.seq_len}, {"vocab", c.vocab}})
    if (auto p = positive(key, value)) return p;
  if (c.dim % c.heads != 0) {
    std::string message = "(";  // built step by step: GCC 12 warns on "(" + std::to_string()
    message += std::to_string(c.dim) + ") must be a multiple of model.heads (" + std::to_string(c.heads) + ")";
    return KeyProblem{"model.dim", message};
  }
  if (c.dropout < 0.0 || c.dropout >= 1.0)
    return KeyProblem{"model.dropout", "must be in [0, 1), got " + std::to_string(c.dropout)};
  if (shape.vocab > c.vocab) {
    return KeyProblem{"model.vocab", "is " + std::to_string(c.vocab) + " but the data set has " +
                                         std::to_string(shape.vocab) + " tokens"};
  }
  return std::nullopt;
}

std::optional<KeyProblem> check_mlp(const config::ModelConfig& c, const DataShape& shape, bool known,
                                    int64_t& input_dim, int64_t& classes) {
  if (auto p = resolve("input_dim", c.input_dim, shape.input_dim, "features", known, input_dim)) return p;
  if (auto p = resolve("classes", c.classes, shape.classes, "classes", known, classes)) return p;
  for (int width : c.hidden) {
    if (width <= 0) return KeyProblem{"model.hidden", "widths must be > 0, got " + std::to_string(width)};
  }
  return std::nullopt;
}

// "model.vocab is 64 but ...": the form make_model has always thrown.
[[noreturn]] void throw_problem(const KeyProblem& p) {
  throw UserError(p.key + (p.message.starts_with("(") ? "" : " ") + p.message);
}

std::unique_ptr<Model> make_gpt(const config::ModelConfig& c, const DataShape& shape,
                                c10::Device device, uint64_t seed) {
  if (auto p = check_gpt(c, shape)) throw_problem(*p);
  return std::make_unique<Gpt>(c, device, seed);
}

std::unique_ptr<Model> make_mlp(const config::ModelConfig& c, const DataShape& shape,
                                c10::Device device, uint64_t seed) {
  int64_t input_dim = 0, classes = 0;
  if (auto p = check_mlp(c, shape, true, input_dim, classes)) throw_problem(*p);
  return std::make_unique<Mlp>(input_dim, c.hidden, static_cast<int>(classes), device, seed);
}

int64_t estimate_mlp(const config::ModelConfig& c, const DataShape& shape) {
  int64_t in = std::max<int64_t>(1, c.input_dim > 0 ? c.input_dim : shape.input_dim);
  const int64_t classes = std::max<int64_t>(1, c.classes > 0 ? c.classes : shape.classes);
  int64_t n = 0;
  for (int width : c.hidden) {
    n += in * width + width;
    in = width;
  }
  return n + in * classes + classes;
}

// cnn, lenet5: classifiers of square single-channel images (input_dim = side²).
std::optional<KeyProblem> check_convnet(ConvNet::Kind kind, const config::ModelConfig& c, const DataShape& shape,
                                        bool known, int64_t& side, int64_t& classes) {
  int64_t input_dim = 0;
  if (auto p = resolve("input_dim", c.input_dim, shape.input_dim, "features", known, input_dim)) return p;
  if (auto p = resolve("classes", c.classes, shape.classes, "classes", known, classes)) return p;
  side = input_dim > 0 ? ConvNet::image_side(kind, input_dim) : 0;
  if (input_dim > 0 && side == 0)
    return KeyProblem{"model.name", c.name + " takes square single-channel images of at least " +
                                        (kind == ConvNet::Kind::kCnn ? std::string("4x4") : std::string("12x12")) +
                                        " pixels, but the data has " + std::to_string(input_dim) + " features"};
  return std::nullopt;
}

template <ConvNet::Kind kKind>
std::unique_ptr<Model> make_convnet(const config::ModelConfig& c, const DataShape& shape, c10::Device device,
                                    uint64_t seed) {
  int64_t side = 0, classes = 0;
  if (auto p = check_convnet(kKind, c, shape, true, side, classes)) throw_problem(*p);
  return std::make_unique<ConvNet>(kKind, side * side, static_cast<int>(classes), device, seed);
}

template <ConvNet::Kind kKind>
std::optional<KeyProblem> check_convnet_row(const config::ModelConfig& c, const DataShape& shape, bool known) {
  int64_t side = 0, classes = 0;
  return check_convnet(kKind, c, shape, known, side, classes);
}

template <ConvNet::Kind kKind>
int64_t estimate_convnet(const config::ModelConfig& c, const DataShape& shape) {
  const int64_t input_dim = c.input_dim > 0 ? c.input_dim : shape.input_dim;
  const int64_t side = std::max<int64_t>(ConvNet::image_side(kKind, input_dim), kKind == ConvNet::Kind::kCnn ? 4 : 12);
  return ConvNet::expected_numel(kKind, side, std::max<int64_t>(1, c.classes > 0 ? c.classes : shape.classes));
}

// One row per model: a new model is its file(s) and a row here.
struct ModelKind {
  const char* name;
  // The size rules make() throws for (check_model in model.h).
  std::optional<KeyProblem> (*check)(const config::ModelConfig&, const DataShape&, bool shape_known);
  int64_t (*estimate_numel)(const config::ModelConfig&, const DataShape&);
  std::unique_ptr<Model> (*make)(const config::ModelConfig&, const DataShape&, c10::Device, uint64_t seed);
  int (*blocks)(const config::ModelConfig&);  // model_blocks in model.h
};

const ModelKind kModels[] = {
    {"gpt",
     [](const config::ModelConfig& c, const DataShape& shape, bool known) {
       return check_gpt(c, known ? shape : DataShape{});
     },
     [](const config::ModelConfig& c, const DataShape&) { return Gpt::expected_numel(c); }, make_gpt,
     [](const config::ModelConfig& c) { return c.layers; }},
    {"mlp",
     [](const config::ModelConfig& c, const DataShape& shape, bool known) {
       int64_t input_dim = 0, classes = 0;
       return check_mlp(c, shape, known, input_dim, classes);
     },
     estimate_mlp, make_mlp, [](const config::ModelConfig&) { return 0; }},
    {"cnn", check_convnet_row<ConvNet::Kind::kCnn>, estimate_convnet<ConvNet::Kind::kCnn>,
     make_convnet<ConvNet::Kind::kCnn>, [](const config::ModelConfig&) { return 0; }},
    {"lenet5", check_convnet_row<ConvNet::Kind::kLenet5>, estimate_convnet<ConvNet::Kind::kLenet5>,
     make_convnet<ConvNet::Kind::kLenet5>, [](const config::ModelConfig&) { return 0; }},
};

const ModelKind* find(const std::string& name) {
  for (const ModelKind& m : kModels)
    if (name == m.name) return &m;
  return nullptr;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelKind& m : kModels) names.push_back(m.name);
  return names;
}

std::vector<std::string> block_model_names() {
  std::vector<std::string> names;
  config::ModelConfig probe;  // the defaults: a model with blocks has some by default
  for (const ModelKind& m : kModels)
    if (m.blocks(probe) > 0) names.push_back(m.name);
  return names;
}

std::optional<KeyProblem> check_model(const config::ModelConfig& config, const DataShape& shape,
                                      bool shape_known) {
  if (const ModelKind* m = find(config.name)) return m->check(config, shape, shape_known);
  return KeyProblem{"model.name", "unknown model '" + config.name + "' (valid: " + joined_names() + ")"};
}

int64_t estimate_numel(const config::ModelConfig& config, const DataShape& shape) {
  const ModelKind* m = find(config.name);
  return m ? m->estimate_numel(config, shape) : 0;
}

int model_blocks(const config::ModelConfig& config) {
  const ModelKind* m = find(config.name);
  return m ? m->blocks(config) : 0;
}

std::unique_ptr<Model> make_model(const config::ModelConfig& config, const DataShape& shape,
                                  c10::Device device, uint64_t seed) {
  if (const ModelKind* m = find(config.name)) return m->make(config, shape, device, seed);
  throw UserError("model.name '" + config.name +
                  "' is not a model; valid names: " + joined_names());
}

}  // namespace atl::models
