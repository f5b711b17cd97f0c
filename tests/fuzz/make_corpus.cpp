// Writes the fuzzer's seed corpus: one valid frame per pipeline of fuzz_chains.h, as fuzz
// inputs (byte 0 = pipeline index, byte 1 = options 3, byte 2 = element count, then the
// frame). Run by scripts/fuzz.sh --regenerate-corpus after a wire format change:
//   make_corpus tests/fuzz/corpus
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "tests/fuzz/fuzz_chains.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR\n");
    return 2;
  }
  const auto& chains = atl::compression::fuzz::chains();
  for (size_t i = 0; i < chains.size(); ++i) {
    const int64_t n = 37 + static_cast<int64_t>(i);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) x[j] = std::sin(0.7f * static_cast<float>(j + i)) * (1.0f + static_cast<float>(j % 5));
    std::vector<uint8_t> bytes = {static_cast<uint8_t>(i), 3, static_cast<uint8_t>(n)};
    atl::compression::encode_frame(chains[i], x.data(), n, 1000 + i, bytes);
    std::vector<float> back(static_cast<size_t>(n));
    const atl::Status st = atl::compression::decode_frame(chains[i], bytes.data() + 3, bytes.size() - 3, back.data(), n);
    if (!st.is_ok()) {
      std::fprintf(stderr, "make_corpus: frame %zu does not decode: %s\n", i, st.to_string().c_str());
      return 1;
    }
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%02zu-", i);
    std::string name = prefix + atl::compression::describe_chain(chains[i]);
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
    }
    const std::string path = std::string(argv[1]) + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "make_corpus: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("make_corpus: wrote %zu frames to %s\n", chains.size(), argv[1]);
  return 0;
}
