// The final global parameters of a run, runs/<name>/final_params.bin, written by the
// simulator and by island 0 of a real run so that two runs can be compared bitwise.
// Format (little-endian): "ATLP", u32 version = 1, u64 count, count float32 values,
// u64 xxhash64 of the values. Written atomically (temp file + fsync + rename).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "src/base/status.h"

namespace atl::sim {

void write_params(const std::string& path, const at::Tensor& params);
// kNotFound / kCorrupt (bad magic, version, size or checksum).
StatusOr<at::Tensor> read_params(const std::string& path);

}  // namespace atl::sim
