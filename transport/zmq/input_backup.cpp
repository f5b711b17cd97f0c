#include "transport/zmq/input_backup.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace atl::transport::dataplane {

InputBackup::InputBackup(at::Tensor buffer, at::Tensor copy)
    : buffer_(std::move(buffer)), copy_(std::move(copy)), n_(buffer_.numel()) {
  TORCH_CHECK(copy_.numel() == n_, "InputBackup: the copy must match the buffer");
}

void InputBackup::save(int64_t begin, int64_t end) {
  begin = std::clamp<int64_t>(begin, 0, n_);
  end = std::clamp<int64_t>(end, begin, n_);
  if (begin == end) return;
  auto copy_range = [&](int64_t b, int64_t e) {
    if (e > b) copy_.narrow(0, b, e - b).copy_(buffer_.narrow(0, b, e - b));
  };
  // Saved ranges that touch [begin, end) merge with it; only the gaps between them are copied.
  std::vector<std::pair<int64_t, int64_t>> kept;
  int64_t at = begin, lo = begin, hi = end;
  for (const auto& [b, e] : saved_) {
    if (e < begin || b > end) {
      kept.emplace_back(b, e);
      continue;
    }
    copy_range(at, b);
    at = std::max(at, e);
    lo = std::min(lo, b);
    hi = std::max(hi, e);
  }
  copy_range(at, end);
  kept.emplace_back(lo, hi);
  std::sort(kept.begin(), kept.end());
  saved_ = std::move(kept);
}

void InputBackup::restore() {
  for (const auto& [b, e] : saved_) {
    if (e > b) buffer_.narrow(0, b, e - b).copy_(copy_.narrow(0, b, e - b));
  }
}

}  // namespace atl::transport::dataplane
