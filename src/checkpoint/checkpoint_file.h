// One checkpoint file: a magic, a version and named sections, each with its own checksum,
// then a footer that seals the file (docs/checkpoints.md describes every byte). The format
// is a contract: kVersion changes whenever a byte of it changes, and the reader refuses
// versions it does not know.
//
//   header   "ATOLLCKP", u32 version, u32 section count, u64 xxh3_64(the 16 bytes before)
//   section  u32 name length, u32 0, u64 payload length, name, payload,
//            u64 xxh3_64(payload, seed = xxh3_64(the section's 16-byte head + name))
//   footer   "ATOLLEND", u64 file size, u64 xxh3_64(the section checksums, 8 bytes each)
//
// Every integer is little-endian. What the payloads hold is the writer's business (the
// simulator's sections: src/core/sim_checkpoint.h); this library only stores bytes.
//
// Writing is atomic: the bytes go to a temporary file in the same directory, which is
// fsynced, renamed over the final name, and the directory fsynced, so that a process killed
// at any instant leaves either the complete new file or no file of that name.
//
// Fault injection (tests only, docs/checkpoints.md "Fault injection"): with the environment
// variable ATOLL_CHECKPOINT_FAULT=kill_mid_write:N, the N-th write_checkpoint() of this
// process (1-based) writes half of its bytes to the temporary file, fsyncs them and sends
// SIGKILL to its own process. It is read once, here, and nowhere else.
//
// Pure functions over the file system; thread-safe for distinct paths.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"

namespace atl::checkpoint {

inline constexpr char kMagic[8] = {'A', 'T', 'O', 'L', 'L', 'C', 'K', 'P'};
inline constexpr char kEndMagic[8] = {'A', 'T', 'O', 'L', 'L', 'E', 'N', 'D'};
// 2: algorithm and server state as named entries (docs/checkpoints.md "Named state"); a
// version 1 file is refused with one line naming its version.
inline constexpr uint32_t kVersion = 2;
inline constexpr size_t kHeaderBytes = 24;
inline constexpr size_t kSectionHeadBytes = 16;
inline constexpr size_t kFooterBytes = 24;
inline constexpr size_t kMaxNameBytes = 255;

struct Section {
  std::string name;  // 1..255 bytes, printable ASCII, unique within a file
  std::string data;  // the payload
};

// A checkpoint read back whole, every checksum verified.
class Checkpoint {
 public:
  Checkpoint() = default;
  explicit Checkpoint(std::vector<Section> sections) : sections_(std::move(sections)) {}
  const std::vector<Section>& sections() const { return sections_; }
  // The payload of section `name`, or nullptr.
  const std::string* find(std::string_view name) const;

 private:
  std::vector<Section> sections_;
};

// The file's bytes (what write_checkpoint writes). Throws std::invalid_argument for a bad
// or duplicate section name (a bug of the caller).
std::string encode(const std::vector<Section>& sections);
// Parses and verifies `bytes`; kCorrupt with one line naming what is wrong (bad magic,
// unknown version, truncated, checksum of section "X" wrong, ...). `what` prefixes it.
StatusOr<Checkpoint> decode(std::string_view bytes, const std::string& what);

// Writes the sections to `path` atomically (see above). Errors of the file system are
// returned (kUnavailable with the path and strerror); the previous file at `path`, if any,
// is then untouched.
Status write_checkpoint(const std::string& path, const std::vector<Section>& sections);
// kNotFound when `path` cannot be opened; kCorrupt as decode().
StatusOr<Checkpoint> read_checkpoint(const std::string& path);

}  // namespace atl::checkpoint
