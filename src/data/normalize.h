// data.normalize: standardisation of classification features (IDX images, synthetic data)
// with the mean and standard deviation of the TRAINING split only, applied to both splits
// (docs/data.md "Normalisation").
//
//   global       one mean and one std over every value of the training split
//                (torchvision's MNIST Normalize((0.1307,), (0.3081,)) is this, for MNIST);
//   per_feature  one mean and one std per feature (pixel), as sklearn's StandardScaler.
//
// x' = (x - mean) / std in float32. std is the population std (divide by N). A feature
// that is constant on the training split (std below 1e-12: MNIST's border pixels) is only
// centred (std taken as 1), as StandardScaler does. Sums run in double in row order on one
// thread, so every process of a run (islands, coordinator, simulator) gets the same bits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace atl::data {

struct Normalization {
  std::string mode = "none";  // none | global | per_feature
  std::vector<double> mean;   // 1 value (global) or one per feature; empty for none
  std::vector<double> stddev; // the divisors used (1 where the feature is constant)
  int64_t examples = 0;       // training examples they were computed on

  bool enabled() const { return mode != "none"; }
};

// The statistics of `features` ([N, D] float32, N >= 1) for `mode` (global | per_feature;
// anything else is a broken invariant: c10::Error).
Normalization fit_normalization(const at::Tensor& features, const std::string& mode);

// (features - mean) / std as a new [N, D] float32 tensor. `norm` must fit D.
at::Tensor apply_normalization(const at::Tensor& features, const Normalization& norm);

// The statistics as one JSON object (what runs/<name>/normalization.json holds):
// {"mode":"per_feature","train_examples":N,"features":D,"mean":[...],"std":[...]},
// doubles written so that they read back exactly (%.17g).
std::string normalization_json(const Normalization& norm, int64_t features);

// Writes normalization_json (and a line break) to `run_dir`/normalization.json through a
// temporary file and a rename, or removes a file left there by an earlier run when `norm`
// is disabled. Throws std::runtime_error when the file cannot be written.
void write_normalization(const Normalization& norm, int64_t features, const std::string& run_dir);

}  // namespace atl::data
