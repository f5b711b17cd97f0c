// Language-model data set: a token stream in memory, addressed as windows of seq_len + 1
// tokens. Internal to src/data (others see it through data::Dataset).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/data/dataset.h"

namespace atl::data {

// A whole token file in memory. Text keeps one byte per token, .bin token files two; batches
// widen to int64 only when gathered. Exactly one of the two vectors is used.
struct TokenStream {
  std::vector<uint8_t> bytes;   // text: token = byte value (vocab 256)
  std::vector<uint16_t> words;  // tokens: nanoGPT uint16 ids
  bool wide = false;            // true: `words` holds the stream
  int vocab = 0;                // text: 256; tokens: max id + 1
  std::string source;           // file it came from, for describe()

  int64_t size() const {
    return wide ? static_cast<int64_t>(words.size()) : static_cast<int64_t>(bytes.size());
  }
  int64_t at(int64_t i) const { return wide ? words[i] : bytes[i]; }
};

// Number of whole windows of `seq_len + 1` tokens in a stream of `tokens` tokens.
int64_t window_count(int64_t tokens, int seq_len);

// Examples are windows of the shared stream: example i covers tokens
// [starts[i], starts[i] + seq_len] (seq_len + 1 tokens); input = the first seq_len,
// target = the last seq_len. Read-only; safe to share among threads.
class LmDataset final : public Dataset {
 public:
  // `starts` are token offsets; each window must lie inside the stream. `role` ("train",
  // "val") only feeds describe().
  LmDataset(std::shared_ptr<const TokenStream> stream, std::vector<int64_t> starts, int seq_len,
            int vocab, std::string role);

  int64_t size() const override { return static_cast<int64_t>(starts_.size()); }
  // input [B, seq_len] int64, target [B, seq_len] int64.
  Batch gather(const std::vector<int64_t>& indices) const override;
  int num_classes() const override { return 0; }
  int64_t input_dim() const override { return 0; }
  int vocab_size() const override { return vocab_; }
  const std::vector<int64_t>& labels() const override { return no_labels_; }
  std::string describe() const override;

  // Token offset of example i (tests, reports).
  int64_t window_start(int64_t i) const { return starts_.at(static_cast<size_t>(i)); }
  int seq_len() const { return seq_len_; }

 private:
  std::shared_ptr<const TokenStream> stream_;
  std::vector<int64_t> starts_;
  int seq_len_;
  int vocab_;
  std::string role_;
  std::vector<int64_t> no_labels_;
};

}  // namespace atl::data
