// Minimal leveled logging to stderr. Thread-safe: each call writes one whole line.
#pragma once

#include <sstream>
#include <string>

namespace atl {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Writes "[atoll] warn: message" (one line) when level >= the configured level.
void log_line(LogLevel level, const std::string& message);

}  // namespace atl

#define ATOLL_LOG(level, expr)                                                  \
  do {                                                                          \
    if (static_cast<int>(::atl::LogLevel::level) >= static_cast<int>(::atl::log_level())) { \
      std::ostringstream atoll_log_os_;                                         \
      atoll_log_os_ << expr;                                                    \
      ::atl::log_line(::atl::LogLevel::level, atoll_log_os_.str());         \
    }                                                                           \
  } while (0)
#define ATOLL_INFO(expr) ATOLL_LOG(kInfo, expr)
#define ATOLL_WARN(expr) ATOLL_LOG(kWarn, expr)
#define ATOLL_ERROR(expr) ATOLL_LOG(kError, expr)
#define ATOLL_DEBUG(expr) ATOLL_LOG(kDebug, expr)
