// The final global parameters of a run, runs/<name>/final_params.bin, written by the
// simulator and by the lead island of a real run (the lowest that finishes), or by the coordinator
// for server-role algorithms, so that two runs can be compared bitwise.
// Format (little-endian): "ATLP", u32 version = 1, u64 count, count float32 values,
// u64 xxhash64 of the values. Written atomically (temp file + fsync + rename).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "src/base/status.h"

namespace atl::core {

void write_params(const std::string& path, const at::Tensor& params);
// kNotFound / kCorrupt (bad magic, version, size or checksum).
StatusOr<at::Tensor> read_params(const std::string& path);
// xxhash64 of the parameters' bytes as 16 hex digits: the `global_xxh64` of `island_end`
// records (simulator and real runs), equal on islands that hold bitwise the same model.
std::string params_xxh64_hex(const at::Tensor& params);

}  // namespace atl::core
