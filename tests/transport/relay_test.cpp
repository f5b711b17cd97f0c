// The WAN-emulation relay (transport/relay/relay.h) on loopback with real sockets: echo round
// trips show the configured latency, bulk transfers the configured rate (both within 10%),
// loss stalls cost one round trip each, periodic stalls, cuts reset connections, blackholes
// hold them, and directions that name one bucket share it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/relay/relay.h"

namespace atl::transport::relay {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int port_of(const std::string& address) { return parse_address(address).value().second; }

// A blocking loopback client socket; -1 when the connect fails.
int dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes within `timeout_s`: the bytes read, or fewer on EOF, error or timeout.
// *error receives errno of a failed read (ECONNRESET after a cut), 0 otherwise.
size_t recv_all(int fd, void* data, size_t n, double timeout_s, int* error = nullptr) {
  auto* p = static_cast<uint8_t*>(data);
  size_t got = 0;
  const auto t0 = Clock::now();
  if (error) *error = 0;
  while (got < n) {
    const double left = timeout_s - since(t0);
    pollfd pfd{fd, POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, static_cast<int>(left * 1000) + 1) <= 0) break;
    const ssize_t r = recv(fd, p + got, n - got, 0);
    if (r < 0 && error) *error = errno;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

// A loopback server on a free port: echoes every connection, or (sink) reads it to the end
// and records how many bytes arrived and when the last one did.
class Server {
 public:
  explicit Server(bool sink) : sink_(sink) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] { accept_loop(); });
  }
  ~Server() {
    shutdown(fd_, SHUT_RDWR);
    accepter_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int c : conns_) shutdown(c, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
    for (int c : conns_) close(c);
    close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  uint64_t bytes() const { return bytes_; }
  double last_byte_s() const { return last_byte_s_; }  // seconds since `origin`
  Clock::time_point origin = Clock::now();

 private:
  void accept_loop() {
    for (;;) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::lock_guard<std::mutex> lock(mu_);
      conns_.push_back(c);
      workers_.emplace_back([this, c] { serve(c); });
    }
  }
  void serve(int c) {
    std::vector<uint8_t> buf(1 << 16);
    for (;;) {
      const ssize_t r = recv(c, buf.data(), buf.size(), 0);
      if (r <= 0) return;
      if (sink_) {
        bytes_ += static_cast<uint64_t>(r);
        last_byte_s_ = since(origin);
      } else if (!send_all(c, buf.data(), static_cast<size_t>(r))) {
        return;
      }
    }
  }
  bool sink_;
  int fd_ = -1, port_ = 0;
  std::thread accepter_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<double> last_byte_s_{0};
};

// A relay running on its own thread for the test's lifetime.
class Running {
 public:
  explicit Running(RelayOptions options) {
    auto r = Relay::create(std::move(options));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    relay_ = std::move(r).value();
    started = Clock::now();
    thread_ = std::thread([this] { relay_->run(); });
  }
  ~Running() {
    relay_->stop();
    thread_.join();
  }
  Relay& operator*() { return *relay_; }
  Relay* operator->() { return relay_.get(); }
  // The relay's counters once it has published what it just did (every 50 ms).
  LinkStats stats(size_t link = 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    return relay_->stats().at(link);
  }
  int port(size_t link = 0) const { return port_of(relay_->address(link)); }
  Clock::time_point started;

 private:
  std::unique_ptr<Relay> relay_;
  std::thread thread_;
};

LinkSpec link_to(const Server& s, double latency_s) {
  LinkSpec l;
  l.name = "a->b";
  l.target = s.address();
  l.forward.latency_s = l.backward.latency_s = latency_s;
  return l;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median round trip of `n` small messages on a connection to `port`.
double echo_rtt(int port, int n) {
  const int fd = dial(port);
  EXPECT_GE(fd, 0);
  std::vector<double> rtts;
  char msg[64] = "ping", back[64];
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    EXPECT_TRUE(send_all(fd, msg, sizeof msg));
    EXPECT_EQ(recv_all(fd, back, sizeof back, 5.0), sizeof back);
    rtts.push_back(since(t0));
  }
  close(fd);
  return median(rtts);
}

TEST(Relay, EchoRoundTripShowsTheConfiguredLatency) {
  Server echo(false);
  RelayOptions o;
  o.links = {link_to(echo, 0.050)};
  Running relay(o);
  const double rtt = echo_rtt(relay.port(), 5);
  std::printf("echo round trip through 50 ms each way: %.1f ms\n", 1e3 * rtt);
  EXPECT_GE(rtt, 0.100);
  EXPECT_LE(rtt, 0.110) << "100 ms configured";
  const LinkStats s = relay.stats();
  EXPECT_EQ(s.accepted, 1u);
  EXPECT_EQ(s.forward.bytes, 5u * 64);
  EXPECT_EQ(s.backward.bytes, 5u * 64);
}

TEST(Relay, JitterAddsUpToItsBoundAndKeepsByteOrder) {
  Server echo(false);
  RelayOptions o;
  o.links = {link_to(echo, 0.020)};
  o.links[0].forward.jitter_s = o.links[0].backward.jitter_s = 0.020;
  Running relay(o);
  const int fd = dial(relay.port());
  std::vector<uint8_t> out(200000), back(out.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + i / 251);
  for (size_t off = 0; off < out.size(); off += 1000) ASSERT_TRUE(send_all(fd, out.data() + off, 1000));
  ASSERT_EQ(recv_all(fd, back.data(), back.size(), 10.0), back.size());
  EXPECT_TRUE(out == back) << "bytes reordered or altered";
  close(fd);
  const double rtt = echo_rtt(relay.port(), 9);
  EXPECT_GE(rtt, 0.040);
  EXPECT_LE(rtt, 0.080 * 1.1);
}

// Time for `bytes` through the relay: first byte sent to last byte received by the sink.
double bulk_seconds(int port, Server& sink, size_t bytes) {
  const int fd = dial(port);
  EXPECT_GE(fd, 0);
  std::vector<uint8_t> data(bytes, 0x5a);
  sink.origin = Clock::now();
  EXPECT_TRUE(send_all(fd, data.data(), data.size()));
  for (int i = 0; i < 600 && sink.bytes() < bytes; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  close(fd);
  EXPECT_EQ(sink.bytes(), bytes);
  return sink.last_byte_s();
}

TEST(Relay, BulkTransferShowsTheConfiguredBandwidth) {
  Server sink(true);
  RelayOptions o;
  o.buckets = {{"up:a", 20e6}};
  o.links = {link_to(sink, 0.010)};
  o.links[0].forward.buckets = {"up:a"};
  Running relay(o);
  const size_t bytes = 5'000'000;  // 2 s at 20 Mbit/s
  const double s = bulk_seconds(relay.port(), sink, bytes);
  const double mbps = 8.0 * bytes / (s - 0.010) / 1e6;
  std::printf("5 MB through a 20 Mbit/s bucket: %.3f s, %.2f Mbit/s\n", s, mbps);
  EXPECT_GE(mbps, 18.0);
  EXPECT_LE(mbps, 22.0) << "20 Mbit/s configured";
}

// Loss 0.002 on 1460-byte packets, evenly spaced: 3000000 / 1460 * 0.002 = 4.1 losses, each a
// stall of one RTT (100 ms) on top of 1.2 s of serialisation.
TEST(Relay, EachLostPacketStallsTheStreamOneRoundTrip) {
  Server sink(true);
  RelayOptions o;
  o.buckets = {{"up:a", 20e6}};
  o.links = {link_to(sink, 0.050)};
  o.links[0].forward.buckets = {"up:a"};
  o.links[0].forward.loss = 0.002;
  o.links[0].forward.loss_stall_s = 0.100;
  Running relay(o);
  const size_t bytes = 3'000'000;
  const double s = bulk_seconds(relay.port(), sink, bytes);
  const LinkStats st = relay.stats();
  const double expected_losses = bytes / kPacketBytes * 0.002;
  EXPECT_GE(static_cast<double>(st.forward.loss_stalls), std::floor(expected_losses));
  EXPECT_LE(static_cast<double>(st.forward.loss_stalls), std::ceil(expected_losses));
  EXPECT_NEAR(st.forward.loss_stall_s, 0.1 * static_cast<double>(st.forward.loss_stalls), 1e-9);
  const double predicted = 0.050 + 8.0 * bytes / 20e6 + st.forward.loss_stall_s;
  std::printf("3 MB, 20 Mbit/s, loss 0.002: %llu stalls, %.3f s (predicted %.3f s)\n",
              static_cast<unsigned long long>(st.forward.loss_stalls), s, predicted);
  EXPECT_GE(s, predicted * 0.9);
  EXPECT_LE(s, predicted * 1.1) << "predicted " << predicted << " s";
}

TEST(Relay, RandomLossDrawsAboutTheModelsMeanNumberOfStalls) {
  Server sink(true);
  RelayOptions o;
  o.links = {link_to(sink, 0.001)};
  o.links[0].forward.loss = 0.01;
  o.links[0].forward.loss_stall_s = 0.001;
  o.links[0].forward.random_loss = true;
  Running relay(o);
  const size_t bytes = 2'920'000;  // 2000 packets: 20 losses expected, sd 4.4
  bulk_seconds(relay.port(), sink, bytes);
  const auto losses = relay.stats().forward.loss_stalls;
  EXPECT_GE(losses, 5u);
  EXPECT_LE(losses, 40u);
}

TEST(Relay, PeriodicStallsHoldTheStream) {
  Server sink(true);
  RelayOptions o;
  o.buckets = {{"up:a", 20e6}};
  o.links = {link_to(sink, 0.001)};
  o.links[0].forward.buckets = {"up:a"};
  o.links[0].stall_every_s = 0.4;
  o.links[0].stall_s = 0.2;
  Running relay(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // 2.5 MB = 1 s of serialisation; stalls at [0.4, 0.6) and [0.8, 1.0) at least
  const double s = bulk_seconds(relay.port(), sink, 2'500'000);
  EXPECT_GE(s, 1.0 + 0.4 - 0.05);
  EXPECT_GE(relay.stats().periodic_stalls, 2u);
}

TEST(Relay, CutResetsConnectionsAndRefusesNewOnesUntilItEnds) {
  Server echo(false);
  RelayOptions o;
  o.links = {link_to(echo, 0.001)};
  o.links[0].cuts = {{0.5, 1.5}};
  Running relay(o);
  const int fd = dial(relay.port());
  char msg[16] = "x", back[16];
  ASSERT_TRUE(send_all(fd, msg, sizeof msg));
  ASSERT_EQ(recv_all(fd, back, sizeof back, 2.0), sizeof back);
  std::this_thread::sleep_until(relay.started + std::chrono::milliseconds(700));
  int error = 0;
  EXPECT_EQ(recv_all(fd, back, sizeof back, 1.0, &error), 0u);
  EXPECT_EQ(error, ECONNRESET) << "the cut must reset the connection";
  close(fd);
  // during the cut a new connection is reset at once
  const int fd2 = dial(relay.port());
  ASSERT_GE(fd2, 0);  // the kernel completes the handshake; the relay then resets it
  EXPECT_EQ(recv_all(fd2, back, sizeof back, 0.5, &error), 0u);
  EXPECT_EQ(error, ECONNRESET);
  close(fd2);
  std::this_thread::sleep_until(relay.started + std::chrono::milliseconds(1600));
  EXPECT_LT(echo_rtt(relay.port(), 1), 0.5) << "the link is back";
  const LinkStats s = relay.stats();
  EXPECT_EQ(s.cuts, 1u);
  EXPECT_GE(s.reset, 2u);
}

TEST(Relay, BlackholeKeepsConnectionsAndDeliversAfterTheCut) {
  Server echo(false);
  RelayOptions o;
  o.links = {link_to(echo, 0.001)};
  o.links[0].cuts = {{0.3, 1.3}};
  o.links[0].blackhole = true;
  Running relay(o);
  const int fd = dial(relay.port());
  std::this_thread::sleep_until(relay.started + std::chrono::milliseconds(500));
  char msg[16] = "x", back[16];
  ASSERT_TRUE(send_all(fd, msg, sizeof msg));
  int error = 0;
  EXPECT_EQ(recv_all(fd, back, sizeof back, 0.5, &error), 0u) << "nothing passes a blackhole";
  EXPECT_EQ(error, 0) << "and the connection stays open";
  EXPECT_EQ(recv_all(fd, back, sizeof back, 3.0), sizeof back) << "delivered once the link is back";
  EXPECT_GE(since(relay.started), 1.3);
  close(fd);
  EXPECT_EQ(relay.stats().reset, 0u);
}

// Two links whose forward directions name one bucket (one island's uplink to two peers):
// together they get the bucket's rate, and about half each.
TEST(Relay, DirectionsNamingOneBucketShareIt) {
  Server sink_a(true), sink_b(true);
  RelayOptions o;
  o.buckets = {{"up:0", 20e6}};
  o.links = {link_to(sink_a, 0.001), link_to(sink_b, 0.001)};
  o.links[0].forward.buckets = o.links[1].forward.buckets = {"up:0"};
  Running relay(o);
  const size_t bytes = 2'500'000;
  double a = 0, b = 0;
  std::thread ta([&] { a = bulk_seconds(relay.port(0), sink_a, bytes); });
  std::thread tb([&] { b = bulk_seconds(relay.port(1), sink_b, bytes); });
  ta.join();
  tb.join();
  const double both = std::max(a, b);
  std::printf("2 x 2.5 MB sharing a 20 Mbit/s bucket: %.3f s and %.3f s\n", a, b);
  EXPECT_GE(both, 2.0 * 0.9) << "5 MB at 20 Mbit/s take 2 s";
  EXPECT_LE(both, 2.0 * 1.1);
  EXPECT_GE(std::min(a, b), 0.8 * both) << "shared fairly";
}

TEST(Relay, RejectsMalformedSpecs) {
  RelayOptions o;
  LinkSpec l;
  l.name = "x";
  l.target = "127.0.0.1:1";
  l.forward.buckets = {"nope"};
  o.links = {l};
  EXPECT_EQ(Relay::create(o).status().code(), StatusCode::kInvalidArgument);
  o.links[0].forward.buckets.clear();
  o.links[0].target = "127.0.0.1";
  EXPECT_EQ(Relay::create(o).status().code(), StatusCode::kInvalidArgument);
  o.links[0].target = "tcp://127.0.0.1:1";
  o.links[0].forward.loss = 1.0;
  EXPECT_EQ(Relay::create(o).status().code(), StatusCode::kInvalidArgument);
  o.links[0].forward.loss = 0;
  EXPECT_TRUE(Relay::create(o).is_ok());
}

TEST(Relay, UnreachableTargetResetsTheClient) {
  RelayOptions o;
  LinkSpec l;
  l.name = "x";
  {
    Server gone(false);
    l.target = gone.address();
  }
  o.links = {l};
  Running relay(o);
  const int fd = dial(relay.port());
  ASSERT_GE(fd, 0);
  char b[4];
  EXPECT_EQ(recv_all(fd, b, sizeof b, 2.0), 0u);
  close(fd);
  EXPECT_EQ(relay.stats().failed, 1u);
}

}  // namespace
}  // namespace atl::transport::relay
