// A tiny ordered JSON object writer for metrics records and summaries. Numbers are written
// in the shortest form that round-trips (std::to_chars), so identical values give identical
// bytes; non-finite numbers are written as null.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <string_view>

namespace atl::core {

class JsonObject {
 public:
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, int64_t value);
  JsonObject& add(std::string_view key, uint64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  // Inserts `json` verbatim (an already serialised value).
  JsonObject& add_raw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

std::string json_quote(std::string_view s);
// The number stored under "key" in a flat JSON object written by JsonObject (first match);
// nullopt when absent or not a number. For reading back atoll's own records.
std::optional<double> json_find_number(std::string_view json, std::string_view key);
// Same for a string value (no escapes decoded).
std::optional<std::string> json_find_string(std::string_view json, std::string_view key);
std::string json_number(double v);

}  // namespace atl::core
