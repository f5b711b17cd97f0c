// Status / StatusOr: the return channel for *expected* failures (timeouts, lost peers,
// corrupt frames, bad user input). Broken invariants throw instead; see docs/errors.md.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace atl {

enum class StatusCode : unsigned char {
  kOk = 0,
  kInvalidArgument,   // user input is wrong (config, CLI, data file)
  kNotFound,          // a file or key does not exist
  kTimeout,           // a deadline passed
  kPeerLost,          // a member left or died during an operation
  kMembershipChanged, // the group's epoch moved on
  kCorrupt,           // a frame or file failed validation
  kUnavailable,       // a resource is temporarily not reachable
  kInternal,          // a bug; should not be seen by users
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "timeout: waited 3.0 s for island 2"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
inline Status not_found(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
inline Status corrupt(std::string msg) { return {StatusCode::kCorrupt, std::move(msg)}; }

// Returns from the enclosing function (Status or StatusOr) with the Status of `expr` unless ok.
#define ATOLL_TRY(expr) \
  if (::atl::Status st_ = (expr); !st_.is_ok()) return st_

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {
    if (status_.is_ok()) status_ = Status(StatusCode::kInternal, "StatusOr built from an ok Status");
  }
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { check(); return *value_; }
  const T& value() const& { check(); return *value_; }
  T&& value() && { check(); return std::move(*value_); }
  T* operator->() { check(); return &*value_; }
  T& operator*() { check(); return *value_; }

 private:
  void check() const {
    if (!value_) throw std::logic_error("StatusOr::value() on error: " + status_.to_string());
  }
  Status status_;
  std::optional<T> value_;
};

// An expected failure that ends what the caller was doing, carried across a layer that has
// no Status return channel (an Algorithm's hooks, which return void) up to the loop that
// reports it. what() is one line: "<context>: <status.to_string()>", e.g.
// "island 2: ddp all-reduce at step 17: timeout: the collective did not complete before the
// deadline". main() prints it as a runtime failure (exit 1), without a backtrace.
class StatusError : public std::runtime_error {
 public:
  StatusError(const std::string& context, Status status)
      : std::runtime_error(context + ": " + status.to_string()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// A rule of a component's options that does not hold, found before the component is built:
// `key` is the config key it concerns ("algorithm.fragments"), `message` what is wrong.
// src/ turns it into the one-line user error "FILE:LINE: key 'KEY': MESSAGE".
struct KeyProblem {
  std::string key;
  std::string message;
};

// A mistake of the user's (bad config, missing file, bad CLI). main() prints what() as one
// line and exits with code 2. Thrown only while a run is being set up, never mid-run.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace atl
