// The model registry: every model atoll can build, by the name `model.name` gives.
#include <torch/torch.h>

#include "src/base/status.h"
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
int64_t resolve(const char* key, int64_t from_config, int64_t from_data, const char* what) {
  if (from_config < 0) {
    throw UserError(std::string("model.") + key + " must be >= 0, got " +
                    std::to_string(from_config));
  }
  if (from_config > 0 && from_data > 0 && from_config != from_data) {
    throw UserError(std::string("model.") + key + " is " + std::to_string(from_config) +
                    " but the data set has " + std::to_string(from_data) + " " + what);
  }
  int64_t value = from_config > 0 ? from_config : from_data;
  if (value == 0) {
    throw UserError(std::string("model.") + key + " is unknown: set model." + key +
                    " or use a classification data set");
  }
  return value;
}

std::unique_ptr<Model> make_gpt(const config::ModelConfig& c, const DataShape& shape,
                                c10::Device device, uint64_t seed) {
  auto positive = [](const char* key, int value) {
    if (value <= 0) {
      throw UserError(std::string("model.") + key + " must be > 0, got " + std::to_string(value));
    }
  };
  positive("layers", c.layers);
  positive("heads", c.heads);
  positive("dim", c.dim);
  positive("seq_len", c.seq_len);
  positive("vocab", c.vocab);
  if (c.dim % c.heads != 0) {
    throw UserError("model.dim (" + std::to_string(c.dim) +
                    ") must be a multiple of model.heads (" + std::to_string(c.heads) + ")");
  }
  if (c.dropout < 0.0 || c.dropout >= 1.0) {
    throw UserError("model.dropout must be in [0, 1), got " + std::to_string(c.dropout));
  }
  if (shape.vocab > c.vocab) {
    throw UserError("model.vocab is " + std::to_string(c.vocab) + " but the data set has " +
                    std::to_string(shape.vocab) + " tokens");
  }
  return std::make_unique<Gpt>(c, device, seed);
}

std::unique_ptr<Model> make_mlp(const config::ModelConfig& c, const DataShape& shape,
                                c10::Device device, uint64_t seed) {
  int64_t input_dim = resolve("input_dim", c.input_dim, shape.input_dim, "features");
  int64_t classes = resolve("classes", c.classes, shape.classes, "classes");
  for (int width : c.hidden) {
    if (width <= 0)
      throw UserError("model.hidden widths must be > 0, got " + std::to_string(width));
  }
  return std::make_unique<Mlp>(input_dim, c.hidden, static_cast<int>(classes), device, seed);
}

}  // namespace

std::vector<std::string> model_names() { return {"gpt", "mlp"}; }

std::unique_ptr<Model> make_model(const config::ModelConfig& config, const DataShape& shape,
                                  c10::Device device, uint64_t seed) {
  if (config.name == "gpt") return make_gpt(config, shape, device, seed);
  if (config.name == "mlp") return make_mlp(config, shape, device, seed);
  throw UserError("model.name '" + config.name +
                  "' is not a model; valid names: " + joined_names());
}

}  // namespace atl::models
