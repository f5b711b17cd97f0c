// kind "text": bytes are tokens. Byte-level modelling needs no tokenizer and accepts any
// encoding; the vocabulary is fixed at 256 so train and validation files always agree.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "src/base/status.h"
#include "src/data/readers.h"

namespace atl::data {

std::vector<uint8_t> read_file(const std::string& path, const std::string& key) {
  if (path.empty()) throw UserError(key + ": no file given");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw UserError(key + ": '" + path + "' does not exist");
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw UserError(key + ": '" + path + "' is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(key + ": cannot open '" + path + "': " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw UserError(key + ": cannot read '" + path + "': " + std::strerror(errno));
  }
  return bytes;
}

std::shared_ptr<TokenStream> read_text(const std::string& path, const std::string& key) {
  auto stream = std::make_shared<TokenStream>();
  stream->bytes = read_file(path, key);
  stream->wide = false;
  stream->vocab = 256;
  stream->source = "text " + path;
  return stream;
}

}  // namespace atl::data
