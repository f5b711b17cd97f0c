// Little-endian byte encoding of the values a checkpoint section holds (docs/checkpoints.md
// "Section payloads"). ByteWriter appends to a string; ByteReader reads one back and, instead
// of throwing, remembers the first read past the end (ok() false; every later read returns
// zero / empty) so that a caller checks once after reading a whole section.
//
// Plain value types; not thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace atl::checkpoint {

static_assert(sizeof(double) == 8, "checkpoints store IEEE-754 binary64 doubles");

class ByteWriter {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void i64(int64_t v) { le(static_cast<uint64_t>(v), 8); }
  void f64(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, 8);
    le(bits, 8);
  }
  void boolean(bool v) { u8(v ? 1 : 0); }
  // u64 length, then the bytes.
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s.data(), s.size());
  }
  // The bytes alone (the reader must know their length).
  void raw(const void* data, size_t n) { out_.append(static_cast<const char*>(data), n); }
  void i64s(const std::vector<int64_t>& v) {
    u64(v.size());
    for (int64_t x : v) i64(x);
  }
  void f64s(const std::vector<double>& v) {
    u64(v.size());
    for (double x : v) f64(x);
  }

  const std::string& bytes() const& { return out_; }
  std::string bytes() && { return std::move(out_); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  uint32_t u32() { return static_cast<uint32_t>(le(4)); }
  uint64_t u64() { return le(8); }
  int64_t i64() { return static_cast<int64_t>(le(8)); }
  double f64() {
    const uint64_t bits = le(8);
    double v = 0;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  bool boolean() { return u8() != 0; }
  std::string str() {
    const uint64_t n = u64();
    if (!take(n)) return {};
    std::string s(in_.substr(pos_ - n, n));
    return s;
  }
  // `n` bytes into dst (zeros when fewer are left).
  void raw(void* dst, size_t n) {
    if (!take(n)) {
      std::memset(dst, 0, n);
      return;
    }
    std::memcpy(dst, in_.data() + pos_ - n, n);
  }
  std::vector<int64_t> i64s() {
    const uint64_t n = u64();
    std::vector<int64_t> v;
    if (n > remaining() / 8) {
      failed_ = true;
      return v;
    }
    for (uint64_t i = 0; i < n; ++i) v.push_back(i64());
    return v;
  }
  std::vector<double> f64s() {
    const uint64_t n = u64();
    std::vector<double> v;
    if (n > remaining() / 8) {
      failed_ = true;
      return v;
    }
    for (uint64_t i = 0; i < n; ++i) v.push_back(f64());
    return v;
  }

  // Marks the input as malformed (for checks the caller makes on values it read).
  void fail() { failed_ = true; }
  // False once a read went past the end (or fail() was called).
  bool ok() const { return !failed_; }
  size_t remaining() const { return failed_ ? 0 : in_.size() - pos_; }
  // Every byte read, and no read past the end.
  bool done() const { return ok() && pos_ == in_.size(); }

 private:
  bool take(uint64_t n) {
    if (failed_ || n > in_.size() - pos_) {
      failed_ = true;
      return false;
    }
    pos_ += n;
    return true;
  }
  uint64_t le(int n) {
    if (!take(static_cast<uint64_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ - n + i])) << (8 * i);
    return v;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace atl::checkpoint
