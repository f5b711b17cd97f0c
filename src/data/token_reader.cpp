// kind "tokens": the nanoGPT prepare.py format (np.array(ids, dtype=np.uint16).tofile(...)):
// no header, little-endian uint16 ids. Decoded byte by byte so the host byte order does not
// matter. The vocabulary is the largest id + 1; a model may use a larger one.
#include <algorithm>

#include "src/base/status.h"
#include "src/data/readers.h"

namespace atl::data {

std::shared_ptr<TokenStream> read_tokens(const std::string& path, const std::string& key) {
  const std::vector<uint8_t> bytes = read_file(path, key);
  if (bytes.empty()) throw UserError(key + ": '" + path + "' is empty");
  if (bytes.size() % 2 != 0) {
    throw UserError(key + ": '" + path + "' has an odd size (" + std::to_string(bytes.size()) +
                    " bytes); a tokens file holds little-endian uint16 ids");
  }
  auto stream = std::make_shared<TokenStream>();
  stream->wide = true;
  stream->words.resize(bytes.size() / 2);
  uint16_t max_id = 0;
  for (size_t i = 0; i < stream->words.size(); ++i) {
    const auto id = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
    stream->words[i] = id;
    max_id = std::max(max_id, id);
  }
  stream->vocab = static_cast<int>(max_id) + 1;
  stream->source = "tokens " + path;
  return stream;
}

}  // namespace atl::data
