// The few POSIX socket calls the relay makes, with errors as Status. Non-blocking TCP
// sockets with TCP_NODELAY (a relay must not add Nagle delays of its own). Internal to
// transport/relay.
#pragma once

#include <sys/socket.h>

#include <string>

#include "src/base/status.h"

namespace atl::transport::relay {

// A resolved socket address.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
};

// `host` may be a name or a numeric address; "*" and "" mean any address (listen only).
StatusOr<SocketAddress> resolve(const std::string& host, int port, bool passive);
// "127.0.0.1:40123" / "[::1]:40123".
std::string to_string(const SocketAddress& address);

// A listening socket (SO_REUSEADDR, non-blocking, close-on-exec); kUnavailable on failure.
StatusOr<int> listen_on(const SocketAddress& address);
// The address a socket is bound to.
SocketAddress local_address(int fd);
// Starts a non-blocking connect; `*in_progress` tells whether it completes later (POLLOUT,
// then connect_result). kUnavailable when it failed at once.
StatusOr<int> start_connect(const SocketAddress& address, bool* in_progress);
// 0 when a started connect succeeded, else the errno it failed with.
int connect_result(int fd);
// Non-blocking, TCP_NODELAY.
void prepare(int fd);
// Closes `fd` with an RST instead of a FIN (SO_LINGER 0): the peer sees "connection reset".
void reset_close(int fd);

}  // namespace atl::transport::relay
