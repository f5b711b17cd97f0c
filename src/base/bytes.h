// The one little-endian byte cursor of atoll: every byte format (codec frames, the control
// protocol, the data plane's header, the rendezvous bodies, hand-overs, checkpoint sections,
// parameter files) reads and writes its integers, reals and strings through this header.
//
// - Writer<Buffer> appends to a std::string or std::vector<uint8_t> the caller owns;
//   ByteWriter owns its std::string (checkpoint sections).
// - Reader reads one byte range, bounds-checked on every read. It never throws: the first
//   read that goes past the end (or a fail() of the caller's) makes it fail for good, every
//   later read returns zero / empty, and error() names the field that did not fit, e.g.
//   "truncated frame: field 'seed' needs bytes [40, 48) but the frame has 44 bytes". A caller
//   reads a whole structure, then checks ok() once.
// - put_at / get_at: a value at a fixed offset of a buffer the caller sized (fixed headers).
//
// Little-endian by memcpy on a little-endian host (a big-endian one fails to compile here).
// Plain value types; not thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace atl::bytes {

static_assert(std::endian::native == std::endian::little,
              "atoll's byte formats are little-endian, written with memcpy; a big-endian host needs byte swaps here");
static_assert(sizeof(double) == 8 && sizeof(float) == 4, "IEEE-754 binary64 / binary32");

template <typename T>
void put_at(uint8_t* out, size_t at, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(out + at, &v, sizeof(T));
}
template <typename T>
T get_at(const uint8_t* in, size_t at) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memcpy(&v, in + at, sizeof(T));
  return v;
}

template <class Buffer>
class Writer {
  static_assert(sizeof(typename Buffer::value_type) == 1, "a byte buffer");

 public:
  explicit Writer(Buffer& out) : out_(&out) {}

  template <typename T>
  void num(T v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    if constexpr (sizeof(T) == 1) {
      // Not through raw(): GCC 12 at -O3 reads a one-byte insert into a std::string as a
      // copy past the value (a false -Warray-bounds / -Wstringop-overflow).
      out_->push_back(static_cast<typename Buffer::value_type>(v));
    } else {
      raw(&v, sizeof(T));
    }
  }
  void u8(uint8_t v) { num(v); }
  void u16(uint16_t v) { num(v); }
  void u32(uint32_t v) { num(v); }
  void u64(uint64_t v) { num(v); }
  void i32(int32_t v) { num(v); }
  void i64(int64_t v) { num(v); }
  void f64(double v) { num(v); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  // A u64 length, then the bytes.
  void str(std::string_view s) { str_as<uint64_t>(s); }
  // A `Len` length, then the bytes (the caller bounds the size to what Len holds).
  template <typename Len>
  void str_as(std::string_view s) {
    num(static_cast<Len>(s.size()));
    raw(s.data(), s.size());
  }
  // The bytes alone (the reader must know their length).
  void raw(const void* data, size_t n) {
    const auto* p = static_cast<const typename Buffer::value_type*>(data);
    out_->insert(out_->end(), p, p + n);
  }
  void i64s(const std::vector<int64_t>& v) {
    u64(v.size());
    for (int64_t x : v) i64(x);
  }
  void f64s(const std::vector<double>& v) {
    u64(v.size());
    for (double x : v) f64(x);
  }
  size_t size() const { return out_->size(); }

 private:
  Buffer* out_;
};

// A Writer that owns its bytes.
class ByteWriter : public Writer<std::string> {
 public:
  ByteWriter() : Writer<std::string>(out_) {}
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;
  const std::string& bytes() const& { return out_; }
  std::string bytes() && { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  // `what` names the input in error(): "frame", "body", "checkpoint section".
  Reader(const void* data, size_t size, const char* what = "input")
      : p_(static_cast<const uint8_t*>(data)), size_(size), what_(what) {}
  explicit Reader(std::string_view in, const char* what = "input") : Reader(in.data(), in.size(), what) {}

  template <typename T>
  T num(const char* field = "") {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    T v{};
    if (const uint8_t* at = take(sizeof(T), field)) std::memcpy(&v, at, sizeof(T));
    return v;
  }
  uint8_t u8(const char* field = "") { return num<uint8_t>(field); }
  uint16_t u16(const char* field = "") { return num<uint16_t>(field); }
  uint32_t u32(const char* field = "") { return num<uint32_t>(field); }
  uint64_t u64(const char* field = "") { return num<uint64_t>(field); }
  int32_t i32(const char* field = "") { return num<int32_t>(field); }
  int64_t i64(const char* field = "") { return num<int64_t>(field); }
  double f64(const char* field = "") { return num<double>(field); }
  bool boolean(const char* field = "") { return u8(field) != 0; }
  // A u64-length string (Writer::str).
  std::string str(const char* field = "") { return str_as<uint64_t>(field, SIZE_MAX); }
  // A `Len`-length string of at most `max` bytes; longer fails with the bound named.
  template <typename Len>
  std::string str_as(const char* field, size_t max) {
    const uint64_t n = num<Len>(field);
    if (!ok()) return {};
    if (n > max) {
      fail("field '" + std::string(field) + "' is " + std::to_string(n) + " bytes, above the bound " +
           std::to_string(max));
      return {};
    }
    const uint8_t* at = take(n, field);
    return at ? std::string(reinterpret_cast<const char*>(at), n) : std::string();
  }
  // The next `n` bytes in place; null (and failed) when fewer are left.
  const uint8_t* take(uint64_t n, const char* field = "") {
    if (failed_) return nullptr;
    if (n > size_ - pos_) {
      fail("truncated " + std::string(what_) + ": field '" + field + "' needs bytes [" + std::to_string(pos_) + ", " +
           std::to_string(pos_ + n) + ") but the " + what_ + " has " + std::to_string(size_) + " bytes");
      return nullptr;
    }
    const uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  // `n` bytes into dst (zeros when fewer are left).
  void raw(void* dst, size_t n, const char* field = "") {
    if (const uint8_t* at = take(n, field)) std::memcpy(dst, at, n);
    else std::memset(dst, 0, n);
  }
  // Whatever is left.
  std::string_view rest() {
    const size_t n = remaining();
    const uint8_t* at = take(n);
    return {reinterpret_cast<const char*>(at), at ? n : 0};
  }
  std::vector<int64_t> i64s(const char* field = "") { return list<int64_t>(field); }
  std::vector<double> f64s(const char* field = "") { return list<double>(field); }

  // Marks the input as malformed (for checks the caller makes on values it read); the first
  // reason is kept.
  void fail(std::string why = "") {
    if (failed_) return;
    failed_ = true;
    error_ = why.empty() ? "malformed " + std::string(what_) : std::move(why);
  }
  // False once a read went past the end (or fail() was called).
  bool ok() const { return !failed_; }
  const std::string& error() const { return error_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return failed_ ? 0 : size_ - pos_; }
  // Every byte read, and no read past the end.
  bool done() const { return ok() && pos_ == size_; }

 private:
  template <typename T>
  std::vector<T> list(const char* field) {
    const uint64_t n = u64(field);
    std::vector<T> v;
    if (n > remaining() / sizeof(T)) {
      fail("truncated " + std::string(what_) + ": field '" + field + "' declares " + std::to_string(n) +
           " values, more than the " + std::to_string(remaining()) + " bytes left");
      return v;
    }
    v.resize(n);
    for (auto& x : v) x = num<T>(field);
    return v;
  }

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const char* what_;
  bool failed_ = false;
  std::string error_;
};

// ---- symmetric layouts -----------------------------------------------------------------
// A structure states its layout once, for both directions:
//
//   template <class Io, class T>  // T: Thing or const Thing
//   void layout(Io& io, T& t) {
//     io.u64("epoch", t.epoch);               // the call names the wire type; the member is
//     io.i64s("members", t.members);          // any integer / real / container of integers
//     io.list("records", t.records, [&](auto& r) { io.i64("island", r.island); });
//   }
//
// layout(out, thing) with an Out writes it; layout(in, thing) with an In reads it back (a read
// past the end or io.fail() leaves the In failed, as Reader). Io::kReads tells a layout that
// must check what it read (`if constexpr (Io::kReads)`).
template <class Buffer>
class Out {
 public:
  static constexpr bool kReads = false;
  explicit Out(Writer<Buffer>& w) : w_(&w) {}

  template <class T>
  void u8(const char*, const T& v) { w_->u8(static_cast<uint8_t>(v)); }
  template <class T>
  void u32(const char*, const T& v) { w_->u32(static_cast<uint32_t>(v)); }
  template <class T>
  void u64(const char*, const T& v) { w_->u64(static_cast<uint64_t>(v)); }
  template <class T>
  void i64(const char*, const T& v) { w_->i64(static_cast<int64_t>(v)); }
  template <class T>
  void f64(const char*, const T& v) { w_->f64(static_cast<double>(v)); }
  void str(const char*, const std::string& s) { w_->str(s); }
  // A u64 length, then the bytes (the same bytes as str).
  template <class C>
  void blob(const char*, const C& bytes) {
    w_->u64(bytes.size());
    w_->raw(bytes.data(), bytes.size());
  }
  // A u64 count, then each value as i64 (Writer::i64s).
  template <class C>
  void i64s(const char*, const C& c) {
    w_->u64(c.size());
    for (const auto& x : c) w_->i64(static_cast<int64_t>(x));
  }
  // A u64 count, then each element as `each` lays it out.
  template <class C, class F>
  void list(const char*, C& c, F&& each) {
    w_->u64(c.size());
    for (auto& x : c) each(x);
  }
  // A u64 count, then each (key, value) as `each(key, value)` lays them out.
  template <class M, class F>
  void map(const char*, M& m, F&& each) {
    w_->u64(m.size());
    for (auto& [k, v] : m) each(k, v);
  }
  void fail() {}
  bool ok() const { return true; }
  Writer<Buffer>& writer() { return *w_; }

 private:
  Writer<Buffer>* w_;
};

class In {
 public:
  static constexpr bool kReads = true;
  explicit In(Reader& r) : r_(&r) {}

  template <class T>
  void u8(const char* f, T& v) { v = static_cast<T>(r_->u8(f)); }
  template <class T>
  void u32(const char* f, T& v) { v = static_cast<T>(r_->u32(f)); }
  template <class T>
  void u64(const char* f, T& v) { v = static_cast<T>(r_->u64(f)); }
  template <class T>
  void i64(const char* f, T& v) { v = static_cast<T>(r_->i64(f)); }
  template <class T>
  void f64(const char* f, T& v) { v = static_cast<T>(r_->f64(f)); }
  void str(const char* f, std::string& s) { s = r_->str(f); }
  template <class C>
  void blob(const char* f, C& bytes) {
    const std::string s = r_->str(f);
    bytes.assign(s.begin(), s.end());
  }
  template <class C>
  void i64s(const char* f, C& c) {
    c.clear();
    for (int64_t x : r_->i64s(f)) c.insert(c.end(), static_cast<typename C::value_type>(x));
  }
  template <class C, class F>
  void list(const char* f, C& c, F&& each) {
    const uint64_t n = count(f);
    c.clear();
    for (uint64_t i = 0; i < n && r_->ok(); ++i) {
      typename C::value_type x{};
      each(x);
      c.push_back(std::move(x));
    }
  }
  template <class M, class F>
  void map(const char* f, M& m, F&& each) {
    const uint64_t n = count(f);
    m.clear();
    for (uint64_t i = 0; i < n && r_->ok(); ++i) {
      typename M::key_type k{};
      typename M::mapped_type v{};
      each(k, v);
      m.insert_or_assign(std::move(k), std::move(v));
    }
  }
  void fail() { r_->fail(); }
  bool ok() const { return r_->ok(); }
  Reader& reader() { return *r_; }

 private:
  // A u64 element count; every element takes at least one byte, so a count above what is
  // left fails at once (no allocation from a hostile count).
  uint64_t count(const char* f) {
    const uint64_t n = r_->u64(f);
    if (n > r_->remaining()) r_->fail("field '" + std::string(f) + "' counts " + std::to_string(n) +
                                      " elements, more than the bytes left");
    return r_->ok() ? n : 0;
  }
  Reader* r_;
};

}  // namespace atl::bytes
