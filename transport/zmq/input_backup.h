// The caller's input of an all-reduce, kept so that an attempt can restart from it: saved
// region by region just before the data phase first writes each region of the buffer, rather
// than copied whole when the collective is issued. Each region is then copied while the
// write is about to bring it into cache anyway, and the island thread does not copy the
// buffer before the collective can start. Regions never written need no copy: the buffer
// still holds them.
//
// Used by AllreduceOp and its exchanges on the I/O thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace atl::transport::dataplane {

class InputBackup {
 public:
  // `buffer` ([n] float32) holds the input now; `copy` ([n] float32, contents unspecified)
  // receives the saved regions.
  InputBackup(at::Tensor buffer, at::Tensor copy);

  // Saves buffer[begin, end) unless saved already; call before writing it.
  void save(int64_t begin, int64_t end);
  // buffer <- the input (the saved regions are written back; they stay saved).
  void restore();
  const at::Tensor& copy() const { return copy_; }

 private:
  at::Tensor buffer_, copy_;
  int64_t n_ = 0;
  std::vector<std::pair<int64_t, int64_t>> saved_;  // disjoint [begin, end), ascending
};

}  // namespace atl::transport::dataplane
