#include "src/sim/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace atl::sim {

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

}  // namespace atl::sim
