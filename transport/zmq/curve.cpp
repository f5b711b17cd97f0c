#include "transport/zmq/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "src/base/log.h"

namespace atl::transport::curve {
namespace fs = std::filesystem;

Status available() {
  if (zmq_has("curve")) return Status::ok();
  return Status(StatusCode::kUnavailable,
                "transport.curve is on but this libzmq was built without CURVE security "
                "(zmq_has(\"curve\") is false); install a libzmq built with libsodium "
                "(Debian's libzmq5 is) or set transport.curve: false on a trusted network");
}

bool valid_key_text(const std::string& z85) {
  if (z85.size() != 40) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, z85.c_str()) != nullptr;
}

namespace {

bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

std::string errno_text() { return std::strerror(errno); }

// Writes `text` to a new file with `mode`; never replaces an existing file.
Status write_new_file(const fs::path& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return invalid_argument("key file '" + path.string() + "' already exists; keys are never overwritten");
    }
    return Status(StatusCode::kUnavailable, "cannot create '" + path.string() + "': " + errno_text());
  }
  // The umask may have removed bits; the secret key must be exactly 0600.
  const bool ok = ::fchmod(fd, mode) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) return Status(StatusCode::kUnavailable, "cannot write '" + path.string() + "': " + why);
  return Status::ok();
}

StatusOr<std::string> read_key_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read key file '" + path.string() + "'");
  std::string text;
  std::getline(in, text, '\0');
  if (text.size() > 4096) return invalid_argument("key file '" + path.string() + "' is too large");
  auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  text.erase(text.begin(), std::find_if_not(text.begin(), text.end(), space));
  text.erase(std::find_if_not(text.rbegin(), text.rend(), space).base(), text.end());
  if (!valid_key_text(text)) {
    return invalid_argument("key file '" + path.string() + "' does not hold a 40-character Z85 CURVE key");
  }
  return text;
}

}  // namespace

StatusOr<KeyPair> generate_keypair(const std::string& dir, const std::string& name) {
  if (Status st = available(); !st.is_ok()) return st;
  if (!plain_name(name)) return invalid_argument("key name '" + name + "' is not a plain file name");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kUnavailable, "cannot create key directory '" + dir + "': " + ec.message());
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status(StatusCode::kUnavailable, std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  }
  const fs::path key_path = fs::path(dir) / (name + ".key");
  const fs::path pub_path = fs::path(dir) / (name + ".pub");
  if (fs::exists(pub_path)) {
    return invalid_argument("key file '" + pub_path.string() + "' already exists; keys are never overwritten");
  }
  if (Status st = write_new_file(key_path, std::string(sec) + "\n", 0600); !st.is_ok()) return st;
  if (Status st = write_new_file(pub_path, std::string(pub) + "\n", 0644); !st.is_ok()) {
    fs::remove(key_path, ec);  // no half-written pair
    return st;
  }
  return KeyPair{pub, sec};
}

StatusOr<KeyPair> load_keypair(const std::string& dir, const std::string& name) {
  if (Status st = available(); !st.is_ok()) return st;
  const fs::path key_path = fs::path(dir) / (name + ".key");
  StatusOr<std::string> secret = read_key_file(key_path);
  if (!secret.is_ok()) return secret.status();
  struct stat info{};
  if (::stat(key_path.c_str(), &info) == 0 && (info.st_mode & 077) != 0) {
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(key_path.string()).second) {
      ATOLL_WARN("secret key '" << key_path.string() << "' is readable by group or others; chmod 600 it");
    }
  }
  char pub[41];
  if (zmq_curve_public(pub, secret->c_str()) != 0) {
    return invalid_argument("key file '" + key_path.string() + "': cannot derive the public key");
  }
  return KeyPair{pub, *secret};
}

StatusOr<std::string> load_public_key(const std::string& path) { return read_key_file(path); }

StatusOr<std::vector<std::string>> load_allowed_keys(const std::string& dir) {
  const fs::path allowed = fs::path(dir) / "allowed";
  std::error_code ec;
  if (!fs::is_directory(allowed, ec)) {
    return not_found("allow-list directory '" + allowed.string() + "' does not exist");
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(allowed, ec)) {
    if (entry.path().extension() == ".pub") files.push_back(entry.path());
  }
  if (ec) return Status(StatusCode::kUnavailable, "cannot list '" + allowed.string() + "': " + ec.message());
  std::sort(files.begin(), files.end());
  std::vector<std::string> keys;
  for (const fs::path& f : files) {
    StatusOr<std::string> key = read_key_file(f);
    if (!key.is_ok()) return key.status();
    keys.push_back(*key);
  }
  return keys;
}

}  // namespace atl::transport::curve
