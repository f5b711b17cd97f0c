// Fitting and applying data.normalize. Plain loops over the [N, D] buffer rather than
// at::mean / at::std: their reductions may split the sum over threads, and the statistics
// must be the same bits in every process whatever run.threads is.
#include "src/data/normalize.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace atl::data {

namespace {

constexpr double kConstantFeature = 1e-12;  // std below this: centre only

std::string json_list(const std::vector<double>& v) {
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.17g", v[i]);
    if (i > 0) out += ',';
    out += buf;
  }
  return out + "]";
}

}  // namespace

Normalization fit_normalization(const at::Tensor& features, const std::string& mode) {
  TORCH_CHECK(mode == "global" || mode == "per_feature", "fit_normalization: unknown mode '", mode, "'");
  TORCH_CHECK(features.dim() == 2 && features.scalar_type() == at::kFloat && features.is_contiguous(),
              "fit_normalization: features must be a contiguous [N, D] float32 tensor");
  const int64_t n = features.size(0), d = features.size(1);
  TORCH_CHECK(n >= 1 && d >= 1, "fit_normalization: empty features");
  const float* x = features.data_ptr<float>();
  const bool global = mode == "global";
  const size_t groups = global ? 1 : static_cast<size_t>(d);
  std::vector<double> sum(groups, 0.0), sq(groups, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    if (global) {
      for (int64_t j = 0; j < d; ++j) sum[0] += row[j];
    } else {
      for (int64_t j = 0; j < d; ++j) sum[static_cast<size_t>(j)] += row[j];
    }
  }
  const double per_group = global ? static_cast<double>(n) * static_cast<double>(d) : static_cast<double>(n);
  Normalization norm;
  norm.mode = mode;
  norm.examples = n;
  norm.mean.resize(groups);
  for (size_t g = 0; g < groups; ++g) norm.mean[g] = sum[g] / per_group;
  // Second pass: squared deviations from the mean (no cancellation as in E[x^2] - E[x]^2).
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    for (int64_t j = 0; j < d; ++j) {
      const size_t g = global ? 0 : static_cast<size_t>(j);
      const double dev = row[j] - norm.mean[g];
      sq[g] += dev * dev;
    }
  }
  norm.stddev.resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    const double s = std::sqrt(sq[g] / per_group);
    norm.stddev[g] = s < kConstantFeature ? 1.0 : s;
  }
  return norm;
}

at::Tensor apply_normalization(const at::Tensor& features, const Normalization& norm) {
  TORCH_CHECK(features.dim() == 2 && features.scalar_type() == at::kFloat,
              "apply_normalization: features must be [N, D] float32");
  const int64_t n = features.size(0), d = features.size(1);
  const bool global = norm.mode == "global";
  TORCH_CHECK(norm.mean.size() == (global ? 1u : static_cast<size_t>(d)) && norm.stddev.size() == norm.mean.size(),
              "apply_normalization: statistics for ", norm.mean.size(), " groups, features have ", d);
  const at::Tensor in = features.contiguous();
  at::Tensor out = at::empty({n, d}, at::kFloat);
  const float* x = in.data_ptr<float>();
  float* y = out.data_ptr<float>();
  std::vector<float> mean(static_cast<size_t>(d)), divisor(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    const size_t g = global ? 0 : static_cast<size_t>(j);
    mean[static_cast<size_t>(j)] = static_cast<float>(norm.mean[g]);
    divisor[static_cast<size_t>(j)] = static_cast<float>(norm.stddev[g]);
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      y[i * d + j] = (x[i * d + j] - mean[static_cast<size_t>(j)]) / divisor[static_cast<size_t>(j)];
    }
  }
  return out;
}

std::string normalization_json(const Normalization& norm, int64_t features) {
  return "{\"mode\":\"" + norm.mode + "\",\"train_examples\":" + std::to_string(norm.examples) +
         ",\"features\":" + std::to_string(features) + ",\"mean\":" + json_list(norm.mean) +
         ",\"std\":" + json_list(norm.stddev) + "}";
}

void write_normalization(const Normalization& norm, int64_t features, const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(run_dir) / "normalization.json";
  std::error_code ec;
  if (!norm.enabled()) {
    fs::remove(path, ec);
    return;
  }
  const fs::path tmp = path.string() + ".tmp";
  bool written = false;
  errno = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << normalization_json(norm, features) << "\n";
    written = static_cast<bool>(out.flush());
  }
  if (written) fs::rename(tmp, path, ec);
  if (!written || ec) {
    fs::remove(tmp, ec);  // a full disk keeps no half file
    const std::string why = written ? "cannot rename its temporary file" : errno != 0 ? std::strerror(errno) : "write failed";
    throw std::runtime_error("cannot write " + path.string() + ": " + why);
  }
}

}  // namespace atl::data
