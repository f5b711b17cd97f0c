#include "src/checkpoint/checkpoint_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>

#include "src/base/hash.h"
#include "src/base/bytes.h"

namespace atl::checkpoint {
namespace {

uint64_t section_checksum(std::string_view head_and_name, std::string_view payload) {
  return xxh3_64(payload.data(), payload.size(), xxh3_64(head_and_name.data(), head_and_name.size()));
}

uint64_t read_u64(std::string_view b, size_t at) {
  bytes::Reader r(b.substr(at, 8));
  return r.u64();
}
uint32_t read_u32(std::string_view b, size_t at) {
  bytes::Reader r(b.substr(at, 4));
  return r.u32();
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

// ATOLL_CHECKPOINT_FAULT=kill_mid_write:N -> N; 0 when unset or malformed.
int64_t kill_mid_write_at() {
  static const int64_t n = [] {
    const char* v = std::getenv("ATOLL_CHECKPOINT_FAULT");
    const std::string prefix = "kill_mid_write:";
    if (v == nullptr || std::strncmp(v, prefix.c_str(), prefix.size()) != 0) return int64_t{0};
    return static_cast<int64_t>(std::strtoll(v + prefix.size(), nullptr, 10));
  }();
  return n;
}
std::atomic<int64_t> writes{0};

Status io_error(const std::string& what, const std::string& path) {
  return {StatusCode::kUnavailable, "cannot " + what + " '" + path + "': " + std::strerror(errno)};
}

Status write_all(int fd, const char* data, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write", path);
    }
    done += static_cast<size_t>(w);
  }
  return Status::ok();
}

}  // namespace

const std::string* Checkpoint::find(std::string_view name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s.data;
  return nullptr;
}

std::string encode(const std::vector<Section>& sections) {
  std::set<std::string> names;
  bytes::ByteWriter out;
  out.raw(kMagic, 8);
  out.u32(kVersion);
  out.u32(static_cast<uint32_t>(sections.size()));
  out.u64(xxh3_64(out.bytes().data(), 16));
  bytes::ByteWriter sums;
  for (const auto& s : sections) {
    if (!valid_name(s.name)) throw std::invalid_argument("checkpoint section name '" + s.name + "' is not valid");
    if (!names.insert(s.name).second) throw std::invalid_argument("duplicate checkpoint section '" + s.name + "'");
    bytes::ByteWriter head;
    head.u32(static_cast<uint32_t>(s.name.size()));
    head.u32(0);
    head.u64(s.data.size());
    head.raw(s.name.data(), s.name.size());
    const uint64_t sum = section_checksum(head.bytes(), s.data);
    out.raw(head.bytes().data(), head.bytes().size());
    out.raw(s.data.data(), s.data.size());
    out.u64(sum);
    sums.u64(sum);
  }
  const uint64_t size = out.bytes().size() + kFooterBytes;
  out.raw(kEndMagic, 8);
  out.u64(size);
  out.u64(xxh3_64(sums.bytes().data(), sums.bytes().size()));
  return std::move(out).bytes();
}

StatusOr<Checkpoint> decode(std::string_view b, const std::string& what) {
  auto bad = [&](const std::string& why) { return corrupt(what + ": " + why); };
  if (b.size() < kHeaderBytes + kFooterBytes) {
    if (b.size() >= 8 && std::memcmp(b.data(), kMagic, 8) != 0) return bad("not an atoll checkpoint (bad magic)");
    return bad("truncated (" + std::to_string(b.size()) + " bytes, less than a header and a footer)");
  }
  if (std::memcmp(b.data(), kMagic, 8) != 0) return bad("not an atoll checkpoint (bad magic)");
  if (xxh3_64(b.data(), 16) != read_u64(b, 16)) return bad("header checksum mismatch");
  const uint32_t version = read_u32(b, 8);
  if (version != kVersion)
    return bad("version " + std::to_string(version) + " is not readable by this atoll (it reads version " +
               std::to_string(kVersion) + ")");
  const uint32_t count = read_u32(b, 12);
  // The footer first: a file cut short says so before any section is looked at.
  const std::string_view footer = b.substr(b.size() - kFooterBytes);
  if (std::memcmp(footer.data(), kEndMagic, 8) != 0 || read_u64(footer, 8) != b.size()) {
    if (std::memcmp(footer.data(), kEndMagic, 8) == 0)
      return bad("size " + std::to_string(b.size()) + " bytes does not match the footer's " +
                 std::to_string(read_u64(footer, 8)));
    return bad("truncated or unsealed (no footer at its end; " + std::to_string(b.size()) + " bytes)");
  }
  const size_t end = b.size() - kFooterBytes;
  size_t at = kHeaderBytes;
  std::vector<Section> sections;
  bytes::ByteWriter sums;
  for (uint32_t i = 0; i < count; ++i) {
    if (end - at < kSectionHeadBytes) return bad("section " + std::to_string(i) + " runs past the footer");
    const uint32_t name_len = read_u32(b, at);
    const uint64_t size = read_u64(b, at + 8);
    if (name_len == 0 || name_len > kMaxNameBytes || read_u32(b, at + 4) != 0)
      return bad("section " + std::to_string(i) + " has a malformed head");
    const size_t rest = end - at - kSectionHeadBytes;  // name, payload and checksum fit here
    if (name_len > rest || rest - name_len < 8 || size > rest - name_len - 8)
      return bad("section " + std::to_string(i) + " runs past the footer");
    const std::string_view head = b.substr(at, kSectionHeadBytes + name_len);
    std::string name(head.substr(kSectionHeadBytes));
    const std::string_view payload = b.substr(at + head.size(), size);
    const uint64_t sum = read_u64(b, at + head.size() + size);
    if (section_checksum(head, payload) != sum) return bad("checksum mismatch in section '" + name + "'");
    sums.u64(sum);
    sections.push_back({std::move(name), std::string(payload)});
    at += head.size() + size + 8;
  }
  if (at != end) return bad("bytes between the last section and the footer");
  if (xxh3_64(sums.bytes().data(), sums.bytes().size()) != read_u64(footer, 16)) return bad("footer checksum mismatch");
  return Checkpoint(std::move(sections));
}

Status write_checkpoint(const std::string& path, const std::vector<Section>& sections) {
  const std::string bytes = encode(sections);
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  const std::string tmp = (p.parent_path() / std::string(".").append(p.filename().string()).append(".tmp")).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("create", tmp);
  const int64_t n = ++writes;
  if (kill_mid_write_at() == n) {
    // Fault injection: half the file on disk, then a kill that no handler can catch.
    (void)write_all(fd, bytes.data(), bytes.size() / 2, tmp);
    ::fsync(fd);
    ::kill(::getpid(), SIGKILL);
  }
  Status s = write_all(fd, bytes.data(), bytes.size(), tmp);
  if (s.is_ok() && ::fsync(fd) != 0) s = io_error("fsync", tmp);
  if (::close(fd) != 0 && s.is_ok()) s = io_error("close", tmp);
  if (!s.is_ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    Status r = io_error("rename to", path);
    ::unlink(tmp.c_str());
    return r;
  }
  // The rename itself is durable only once the directory is.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error("open directory", dir);
  const bool synced = ::fsync(dfd) == 0;
  ::close(dfd);
  if (!synced) return io_error("fsync directory", dir);
  return Status::ok();
}

StatusOr<Checkpoint> read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read checkpoint '" + path + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return decode(bytes, "checkpoint '" + path + "'");
}

}  // namespace atl::checkpoint
