// The models' sizes and size rules, one row per model, without building one: what
// validation and memory estimates ask (model.h: check_model, estimate_numel, model_blocks).
// No libtorch: the `atoll` front end validates configs with it. A model's factory is its row
// of src/models/registry.cpp.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/models/convnet.h"
#include "src/models/gpt.h"
#include "src/models/model.h"

namespace atl::models {

namespace {

// Data-derived size: the config value when set, else the data's; both set must agree.
// `value` is the result (0 when the data does not say and `known` is false).
std::optional<KeyProblem> resolve_size(const char* key, int64_t from_config, int64_t from_data,
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

std::optional<KeyProblem> check_gpt(const config::ModelConfig& c, const DataShape& shape, bool known) {
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
  if (known && shape.vocab > c.vocab) {
    return KeyProblem{"model.vocab", "is " + std::to_string(c.vocab) + " but the data set has " +
                                         std::to_string(shape.vocab) + " tokens"};
  }
  return std::nullopt;
}

std::optional<KeyProblem> check_mlp(const config::ModelConfig& c, const DataShape& shape, bool known) {
  int64_t input_dim = 0, classes = 0;
  if (auto p = resolve_size("input_dim", c.input_dim, shape.input_dim, "features", known, input_dim)) return p;
  if (auto p = resolve_size("classes", c.classes, shape.classes, "classes", known, classes)) return p;
  for (int width : c.hidden) {
    if (width <= 0) return KeyProblem{"model.hidden", "widths must be > 0, got " + std::to_string(width)};
  }
  return std::nullopt;
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
template <ConvNet::Kind kKind>
std::optional<KeyProblem> check_convnet(const config::ModelConfig& c, const DataShape& shape, bool known) {
  int64_t input_dim = 0, classes = 0;
  if (auto p = resolve_size("input_dim", c.input_dim, shape.input_dim, "features", known, input_dim)) return p;
  if (auto p = resolve_size("classes", c.classes, shape.classes, "classes", known, classes)) return p;
  if (input_dim > 0 && ConvNet::image_side(kKind, input_dim) == 0)
    return KeyProblem{"model.name", c.name + " takes square single-channel images of at least " +
                                        (kKind == ConvNet::Kind::kCnn ? std::string("4x4") : std::string("12x12")) +
                                        " pixels, but the data has " + std::to_string(input_dim) + " features"};
  return std::nullopt;
}

template <ConvNet::Kind kKind>
int64_t estimate_convnet(const config::ModelConfig& c, const DataShape& shape) {
  const int64_t input_dim = c.input_dim > 0 ? c.input_dim : shape.input_dim;
  const int64_t side = std::max<int64_t>(ConvNet::image_side(kKind, input_dim), kKind == ConvNet::Kind::kCnn ? 4 : 12);
  return ConvNet::expected_numel(kKind, side, std::max<int64_t>(1, c.classes > 0 ? c.classes : shape.classes));
}

int no_blocks(const config::ModelConfig&) { return 0; }

// One row per model: its size rules (check_model), its parameter count (estimate_numel) and
// its repeated blocks (model_blocks).
struct ModelSpec {
  const char* name;
  std::optional<KeyProblem> (*check)(const config::ModelConfig&, const DataShape&, bool shape_known);
  int64_t (*estimate_numel)(const config::ModelConfig&, const DataShape&);
  int (*blocks)(const config::ModelConfig&);
};

const ModelSpec kSpecs[] = {
    {"gpt", check_gpt, [](const config::ModelConfig& c, const DataShape&) { return Gpt::expected_numel(c); },
     [](const config::ModelConfig& c) { return c.layers; }},
    {"mlp", check_mlp, estimate_mlp, no_blocks},
    {"cnn", check_convnet<ConvNet::Kind::kCnn>, estimate_convnet<ConvNet::Kind::kCnn>, no_blocks},
    {"lenet5", check_convnet<ConvNet::Kind::kLenet5>, estimate_convnet<ConvNet::Kind::kLenet5>, no_blocks},
};

const ModelSpec* find_spec(const std::string& name) {
  for (const ModelSpec& m : kSpecs)
    if (name == m.name) return &m;
  return nullptr;
}

std::string model_list() {
  std::string out;
  for (const auto& name : model_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

int64_t Gpt::expected_numel(const config::ModelConfig& c) {
  const int64_t V = c.vocab, T = c.seq_len, C = c.dim, L = c.layers;
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + (c.tie_embeddings ? 0 : V * C);
}

int64_t ConvNet::image_side(Kind kind, int64_t input_dim) {
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(input_dim))));
  if (side * side != input_dim) return 0;
  return side >= (kind == Kind::kCnn ? 4 : 12) ? side : 0;
}

ConvNet::Shape ConvNet::shape_of(Kind kind, int64_t side) {
  Shape s;
  if (kind == Kind::kCnn) {
    s.c1 = 32, s.c2 = 64, s.pad2 = 2, s.hidden = {512};
  } else {
    s.c1 = 6, s.c2 = 16, s.pad2 = 0, s.hidden = {120, 84};
  }
  s.s1 = side;                               // 'same'
  s.s2 = side / 2 + 2 * s.pad2 - kKernel + 1;  // after the first pooling
  s.flat = s.c2 * (s.s2 / 2) * (s.s2 / 2);
  return s;
}

int64_t ConvNet::expected_numel(Kind kind, int64_t side, int64_t classes) {
  const Shape s = shape_of(kind, side);
  int64_t n = (kKernel * kKernel + 1) * s.c1 + (s.c1 * kKernel * kKernel + 1) * s.c2;
  int64_t in = s.flat;
  for (int64_t width : s.hidden) {
    n += in * width + width;
    in = width;
  }
  return n + in * classes + classes;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelSpec& m : kSpecs) names.push_back(m.name);
  return names;
}

std::vector<std::string> block_model_names() {
  std::vector<std::string> names;
  config::ModelConfig probe;  // the defaults: a model with blocks has some by default
  for (const ModelSpec& m : kSpecs)
    if (m.blocks(probe) > 0) names.push_back(m.name);
  return names;
}

std::optional<KeyProblem> check_model(const config::ModelConfig& config, const DataShape& shape,
                                      bool shape_known) {
  if (const ModelSpec* m = find_spec(config.name)) return m->check(config, shape, shape_known);
  return KeyProblem{"model.name", "unknown model '" + config.name + "' (valid: " + model_list() + ")"};
}

int64_t estimate_numel(const config::ModelConfig& config, const DataShape& shape) {
  const ModelSpec* m = find_spec(config.name);
  return m ? m->estimate_numel(config, shape) : 0;
}

int model_blocks(const config::ModelConfig& config) {
  const ModelSpec* m = find_spec(config.name);
  return m ? m->blocks(config) : 0;
}

}  // namespace atl::models
