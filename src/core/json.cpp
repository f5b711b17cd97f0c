#include "src/core/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace atl::core {

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::optional<double> json_find_number(std::string_view json, std::string_view key) {
  const std::string pat = json_quote(key) + ":";
  const size_t at = json.find(pat);
  if (at == std::string_view::npos) return std::nullopt;
  const char* begin = json.data() + at + pat.size();
  const char* end = json.data() + json.size();
  double v = 0;
  auto res = std::from_chars(begin, end, v);
  if (res.ec != std::errc()) return std::nullopt;
  return v;
}

std::optional<std::string> json_find_string(std::string_view json, std::string_view key) {
  const std::string pat = json_quote(key) + ":\"";
  const size_t at = json.find(pat);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t begin = at + pat.size();
  const size_t end = json.find('"', begin);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(json.substr(begin, end - begin));
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

void JsonObject::key(std::string_view k) {
  if (!body_.empty()) body_ += ",";
  body_ += json_quote(k);
  body_ += ":";
}

JsonObject& JsonObject::add(std::string_view k, double v) { key(k); body_ += json_number(v); return *this; }
JsonObject& JsonObject::add(std::string_view k, int64_t v) { key(k); body_ += std::to_string(v); return *this; }
JsonObject& JsonObject::add(std::string_view k, uint64_t v) { key(k); body_ += std::to_string(v); return *this; }
JsonObject& JsonObject::add(std::string_view k, bool v) { key(k); body_ += v ? "true" : "false"; return *this; }
JsonObject& JsonObject::add(std::string_view k, std::string_view v) { key(k); body_ += json_quote(v); return *this; }
JsonObject& JsonObject::add_raw(std::string_view k, std::string_view json) { key(k); body_ += json; return *this; }

}  // namespace atl::core
