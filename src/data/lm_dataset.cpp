#include "src/data/lm_dataset.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace atl::data {

int64_t window_count(int64_t tokens, int seq_len) {
  if (seq_len < 1) throw std::invalid_argument("window_count: seq_len must be >= 1");
  return tokens / (static_cast<int64_t>(seq_len) + 1);
}

LmDataset::LmDataset(std::shared_ptr<const TokenStream> stream, std::vector<int64_t> starts,
                     int seq_len, int vocab, std::string role)
    : stream_(std::move(stream)),
      starts_(std::move(starts)),
      seq_len_(seq_len),
      vocab_(vocab),
      role_(std::move(role)) {
  TORCH_CHECK(stream_ != nullptr, "LmDataset: null token stream");
  TORCH_CHECK(seq_len_ >= 1, "LmDataset: seq_len must be >= 1, got ", seq_len_);
  for (int64_t start : starts_) {
    TORCH_CHECK(start >= 0 && start + seq_len_ + 1 <= stream_->size(), "LmDataset: window at ",
                start, " runs past the stream of ", stream_->size(), " tokens");
  }
}

Batch LmDataset::gather(const std::vector<int64_t>& indices) const {
  const auto rows = static_cast<int64_t>(indices.size());
  const int64_t t = seq_len_;
  at::Tensor input = at::empty({rows, t}, at::kLong);
  at::Tensor target = at::empty({rows, t}, at::kLong);
  int64_t* in = input.data_ptr<int64_t>();
  int64_t* out = target.data_ptr<int64_t>();
  const TokenStream& s = *stream_;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t i = indices[static_cast<size_t>(b)];
    TORCH_CHECK(i >= 0 && i < size(), "LmDataset::gather: index ", i, " out of [0, ", size(), ")");
    const int64_t start = starts_[static_cast<size_t>(i)];
    // One pass over the window: token k is the input at k and the target at k - 1.
    int64_t* in_row = in + b * t;
    int64_t* out_row = out + b * t;
    if (s.wide) {
      const uint16_t* w = s.words.data() + start;
      for (int64_t k = 0; k < t; ++k) {
        in_row[k] = w[k];
        out_row[k] = w[k + 1];
      }
    } else {
      const uint8_t* w = s.bytes.data() + start;
      for (int64_t k = 0; k < t; ++k) {
        in_row[k] = w[k];
        out_row[k] = w[k + 1];
      }
    }
  }
  return {input, target};
}

std::string LmDataset::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), ": %.2fM tokens, %lld %s windows of %d, vocab %d",
                static_cast<double>(stream_->size()) / 1e6, static_cast<long long>(size()),
                role_.c_str(), seq_len_ + 1, vocab_);
  return stream_->source + buf;
}

}  // namespace atl::data
