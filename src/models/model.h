// Models with all parameters in ONE flat contiguous buffer per model instance: every module
// parameter is a view into params(), and every gradient a view into grads(). Snapshots,
// pseudo-gradients, codecs and collectives then work on one buffer (or slices of it).
//
// A Model is owned by one island (thread) at a time; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/config/config.h"
#include "src/data/dataset.h"

namespace atl::models {

// Where one named parameter lives inside the flat buffer.
struct ParamSlice {
  std::string name;            // "blocks.0.attn.qkv.weight"
  int64_t offset = 0;          // first element in params()
  int64_t numel = 0;
  std::vector<int64_t> shape;
  int block = -1;              // transformer block index, -1 for embeddings/head/norm
};

struct FlatBuffers;

// Result of one forward pass.
struct Output {
  at::Tensor loss;             // scalar, mean over the batch (and tokens), requires grad in training
  int64_t correct = 0;         // classifiers: correct predictions (0 for LMs)
  int64_t count = 0;           // examples (classifiers) or tokens (LMs) in the batch
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  // Forward on `batch` (moved to the model's device) and the loss; caller runs backward.
  virtual Output forward(const data::Batch& batch) = 0;
  virtual void set_training(bool training) = 0;

  at::Tensor& params() { return params_; }   // [N] float32, contiguous
  at::Tensor& grads() { return grads_; }     // [N] float32, contiguous
  int64_t numel() const { return params_.numel(); }
  const std::vector<ParamSlice>& layout() const { return layout_; }
  // FLOPs of one forward+backward per example (LM: per token) — for cost models / reports.
  virtual double flops_per_example() const = 0;

  // Points every parameter's gradient into `grads` ([N] float32, contiguous, on the model's
  // device) and drops the model's own gradient buffer. Models of one size may then share one
  // gradient buffer, when only one of them computes at a time and none keeps anything in it
  // between steps (the simulator's islands: docs/simulator.md "Memory").
  void use_gradients(const at::Tensor& grads);

 protected:
  // Takes the buffers, layout and parameters of flatten_parameters() (src/models/flat_params.h).
  void adopt(FlatBuffers&& flat);

  at::Tensor params_;
  at::Tensor grads_;
  std::vector<ParamSlice> layout_;
  std::vector<at::Tensor> parameters_;  // the module's parameters, in layout order
};

// What a model needs to know about the data.
struct DataShape {
  int vocab = 0;          // LMs
  int classes = 0;        // classifiers
  int64_t input_dim = 0;  // classifiers
};

// The size rules make_model throws for, checked on the config alone: `shape` is the data's
// shape when `shape_known` (else the rules that need it are skipped). Empty when they hold.
std::optional<KeyProblem> check_model(const config::ModelConfig& config, const DataShape& shape,
                                      bool shape_known);
// Parameters make_model would allocate for `config` (sizes the data decides and `shape`
// does not know count as 1). For memory estimates before anything is allocated.
int64_t estimate_numel(const config::ModelConfig& config, const DataShape& shape);

// The repeated blocks of the model (a GPT's transformer blocks; 0 when it has none), the
// units that streaming fragments and path modules are made of, and that ParamSlice::block
// numbers.
int model_blocks(const config::ModelConfig& config);

// Registry (models/registry.cpp, one row per model; their sizes: spec.cpp): "gpt", "mlp", "cnn",
// "lenet5". Initialises parameters
// from `seed` (same seed -> bitwise same params). Throws atl::UserError for an unknown name
// (listing the valid ones) or inconsistent sizes.
std::unique_ptr<Model> make_model(const config::ModelConfig& config, const DataShape& shape,
                                  c10::Device device, uint64_t seed);
std::vector<std::string> model_names();
// The names of the models with blocks (model_blocks > 0 at their defaults).
std::vector<std::string> block_model_names();

}  // namespace atl::models
