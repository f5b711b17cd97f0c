#include "src/base/status.h"

namespace atl {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kPeerLost: return "peer lost";
    case StatusCode::kMembershipChanged: return "membership changed";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace atl
