#include "transport/relay/sockets.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace atl::transport::relay {

namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

StatusOr<SocketAddress> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const bool any = host.empty() || host == "*";
  if (any && !passive) return invalid_argument("'*' is not an address to connect to");
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(any ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return invalid_argument("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  SocketAddress a;
  std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.length = static_cast<socklen_t>(res->ai_addrlen);
  freeaddrinfo(res);
  return a;
}

std::string to_string(const SocketAddress& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (address.family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address.storage);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
  inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
  std::string out = "[";  // (built stepwise: GCC 12 warns wrongly on "[" + std::string)
  out += host;
  out += "]:" + std::to_string(ntohs(in6->sin6_port));
  return out;
}

void prepare(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

StatusOr<int> listen_on(const SocketAddress& address) {
  const int fd = socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status(StatusCode::kUnavailable, "socket: " + errno_text());
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length) != 0 ||
      listen(fd, 128) != 0) {
    Status s(StatusCode::kUnavailable, "cannot listen on " + to_string(address) + ": " + errno_text());
    close(fd);
    return s;
  }
  return fd;
}

SocketAddress local_address(int fd) {
  SocketAddress a;
  a.length = sizeof a.storage;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length);
  return a;
}

StatusOr<int> start_connect(const SocketAddress& address, bool* in_progress) {
  const int fd = socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status(StatusCode::kUnavailable, "socket: " + errno_text());
  prepare(fd);
  const bool connected = connect(fd, reinterpret_cast<const sockaddr*>(&address.storage), address.length) == 0;
  if (connected || errno == EINPROGRESS) {
    *in_progress = !connected;
    return fd;
  }
  Status s(StatusCode::kUnavailable, "connect " + to_string(address) + ": " + errno_text());
  close(fd);
  return s;
}

int connect_result(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

void reset_close(int fd) {
  const linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

}  // namespace atl::transport::relay
