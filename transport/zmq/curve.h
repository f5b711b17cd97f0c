// CurveZMQ keys on disk: what `atoll keygen DIR` writes and what the coordinator and islands
// load when `transport.curve` is on.
//
// Layout of a keys directory (transport.keys_dir):
//   <dir>/<name>.key         the secret key, Z85 text (40 characters + newline), mode 0600
//   <dir>/<name>.pub         the public key, Z85 text (40 characters + newline)
//   <dir>/allowed/<any>.pub  public keys the coordinator lets in (copies of islands' .pub)
// Names used by atoll: "coordinator" and "island-K". Islands need the coordinator's .pub
// (the server key they authenticate); the coordinator needs its .key and allowed/.
//
// Free functions; thread-safe. Expected failures (missing or malformed files, libzmq built
// without CURVE) are Status values naming the file.
#pragma once

#include <string>
#include <vector>

#include "src/base/status.h"

namespace atl::transport::curve {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// ok when this libzmq supports CURVE (zmq_has("curve")); kUnavailable with a message that
// says how to get one otherwise.
Status available();

// True for a 40-character Z85 string that decodes to 32 bytes.
bool valid_key_text(const std::string& z85);

// Creates `dir` when needed and writes <dir>/<name>.key (mode 0600) and <dir>/<name>.pub.
// kInvalidArgument when either file already exists (keys are never overwritten) or `name` is
// not a plain file name; kUnavailable when the files cannot be written or CURVE is missing.
StatusOr<KeyPair> generate_keypair(const std::string& dir, const std::string& name);

// Reads <dir>/<name>.key and derives the public key from it. kNotFound / kInvalidArgument
// naming the file. Warns (once per file) when the secret key is readable by group or others.
StatusOr<KeyPair> load_keypair(const std::string& dir, const std::string& name);

// Reads one public key file (Z85 text; surrounding whitespace ignored).
StatusOr<std::string> load_public_key(const std::string& path);

// Every <dir>/allowed/*.pub, sorted by file name. A missing allowed/ directory is kNotFound; a
// malformed file is kInvalidArgument naming it.
StatusOr<std::vector<std::string>> load_allowed_keys(const std::string& dir);

}  // namespace atl::transport::curve
