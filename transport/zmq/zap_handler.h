// A ZAP handler (ZeroMQ Authentication Protocol, RFC 27): libzmq asks it, over
// inproc://zeromq.zap.01 in its context, whether a CURVE client may connect. It accepts
// exactly the public keys of the allow-list and refuses (and logs, once per key) every other
// one. An accepted connection's messages carry the key, Z85, as their "User-Id" property,
// which the coordinator checks against the island's JOIN. The coordinator's allow-list is
// its keys (and keys directory); the data plane's (PeerLinks) the current members' keys.
//
// Owned and used by one thread (the coordinator's loop, or a ZmqGroup's I/O thread); not
// thread-safe.
#pragma once

#include <zmq.hpp>

#include <set>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace atl::transport {

class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 in `context` (one handler per context). `allowed_keys`:
  // Z85 public keys; `allowed_dir`, when not empty, is a keys directory whose allowed/*.pub
  // are re-read on every handshake (keys can be added while the run goes). Throws
  // zmq::error_t when the endpoint is taken (a bug: two handlers in one context).
  // `log_prefix` starts every log line (e.g. which island refused).
  ZapHandler(zmq::context_t& context, std::vector<std::string> allowed_keys, std::string allowed_dir,
             std::string log_prefix = "");

  zmq::socket_t& socket() { return socket_; }
  // Replaces the allow-list's keys (`allowed_dir` still applies).
  void set_allowed(std::set<std::string> keys) { allowed_keys_ = std::move(keys); }
  // Answers one pending request (call when socket() is readable); false when none was
  // pending. Malformed requests are answered with a refusal when possible and logged.
  bool handle_one();

  uint64_t refused() const { return refused_; }
  // The refused public keys (Z85, the first kMaxLoggedKeys), as logged.
  const std::set<std::string>& refused_keys() const { return logged_; }

 private:
  bool allowed(const std::string& z85);

  zmq::socket_t socket_;
  std::set<std::string> allowed_keys_;
  std::string allowed_dir_;
  std::string log_prefix_;
  std::set<std::string> logged_;  // refused keys already logged (bounded)
  uint64_t refused_ = 0;
};

}  // namespace atl::transport
