// The model registry: every model atoll can build, by the name `model.name` gives. What is
// known of a model without building it (its size rules, its parameter count, its blocks) is
// its row of src/models/spec.cpp.
#include <torch/torch.h>

#include <string>

#include "src/base/status.h"
#include "src/models/convnet.h"
#include "src/models/gpt.h"
#include "src/models/mlp.h"
#include "src/models/model.h"

namespace atl::models {

namespace {

// A size the data decides: the config's value when set, else the data's (check_model has
// made sure they agree and that one is known).
int64_t data_size(int64_t from_config, int64_t from_data) { return from_config > 0 ? from_config : from_data; }

std::unique_ptr<Model> make_gpt(const config::ModelConfig& c, const DataShape&, c10::Device device, uint64_t seed) {
  return std::make_unique<Gpt>(c, device, seed);
}

std::unique_ptr<Model> make_mlp(const config::ModelConfig& c, const DataShape& shape, c10::Device device,
                                uint64_t seed) {
  return std::make_unique<Mlp>(data_size(c.input_dim, shape.input_dim), c.hidden,
                               static_cast<int>(data_size(c.classes, shape.classes)), device, seed);
}

template <ConvNet::Kind kKind>
std::unique_ptr<Model> make_convnet(const config::ModelConfig& c, const DataShape& shape, c10::Device device,
                                    uint64_t seed) {
  return std::make_unique<ConvNet>(kKind, data_size(c.input_dim, shape.input_dim),
                                   static_cast<int>(data_size(c.classes, shape.classes)), device, seed);
}

// One row per model: a new model is its file(s), a row here and a row in spec.cpp.
struct ModelFactory {
  const char* name;
  std::unique_ptr<Model> (*make)(const config::ModelConfig&, const DataShape&, c10::Device, uint64_t seed);
};

const ModelFactory kFactories[] = {
    {"gpt", make_gpt},
    {"mlp", make_mlp},
    {"cnn", make_convnet<ConvNet::Kind::kCnn>},
    {"lenet5", make_convnet<ConvNet::Kind::kLenet5>},
};

// "model.vocab is 64 but ...": the form make_model has always thrown.
[[noreturn]] void throw_problem(const KeyProblem& p) {
  throw UserError(p.key + (p.message.starts_with("(") ? "" : " ") + p.message);
}

}  // namespace

std::unique_ptr<Model> make_model(const config::ModelConfig& config, const DataShape& shape,
                                  c10::Device device, uint64_t seed) {
  for (const ModelFactory& f : kFactories) {
    if (config.name != f.name) continue;
    if (auto p = check_model(config, shape, true)) throw_problem(*p);
    return f.make(config, shape, device, seed);
  }
  std::string names;
  for (const auto& name : model_names()) names += (names.empty() ? "" : ", ") + name;
  throw UserError("model.name '" + config.name + "' is not a model; valid names: " + names);
}

}  // namespace atl::models
