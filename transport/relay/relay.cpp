#include "transport/relay/relay.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <deque>
#include <random>

#include "src/base/log.h"
#include "transport/relay/sockets.h"

namespace atl::transport::relay {

namespace {

constexpr size_t kReadBytes = 64 * 1024;  // one read
constexpr size_t kQuantum = 16 * 1024;    // most bytes admitted at once (fair sharing of buckets)
constexpr size_t kMinAdmit = 4096;        // fewer waits for more tokens (fewer wake-ups)
constexpr double kBurstS = 0.02;          // bucket depth in seconds of its rate (>= 2 quanta)

// A token bucket in bytes. Deep enough that a relay woken late keeps the rate.
struct Bucket {
  double rate = 0, burst = 0, tokens = 0, last = 0;  // bytes/s, bytes, bytes, s
  void refill(double now) {
    if (now <= last) return;
    tokens = std::min(burst, tokens + (now - last) * rate);
    last = now;
  }
};

struct Segment {
  std::vector<uint8_t> data;
  size_t off = 0;
  double due = 0;    // delivery time
  double delay = 0;  // what the relay added (latency, jitter, loss stalls)
};

// One direction of one connection: src -> inbox -> (buckets, losses) -> path -> dst.
struct Flow {
  int src = -1, dst = -1;
  const DirectionShape* shape = nullptr;
  std::vector<Bucket*> buckets;
  DirectionStats* stats = nullptr;
  std::mt19937_64 rng;
  std::vector<uint8_t> inbox;
  size_t inbox_off = 0;
  std::deque<Segment> path;
  size_t path_bytes = 0;
  double last_due = 0, stalled_until = 0;
  double packets = 0, next_loss = 0;  // packets admitted so far; evenly spaced: next loss at
  bool paused = false;   // admission was held by a stall: tokens saved meanwhile are forfeit
  bool eof = false;      // src finished sending
  bool shut = false;     // dst's write side shut down after everything was delivered
  bool blocked = false;  // dst would block: wait for POLLOUT
  size_t inbox_bytes() const { return inbox.size() - inbox_off; }
  size_t buffered() const { return inbox_bytes() + path_bytes; }
};

struct Conn {
  size_t link = 0;
  int client = -1, server = -1;
  bool connecting = true;
  bool dead = false;
  Flow fwd, bwd;  // client -> server, server -> client
};

struct LinkState {
  bool down = false, stalling = false;
};

int64_t losses_in(Flow& f, size_t bytes) {
  const DirectionShape& s = *f.shape;
  if (s.loss <= 0) return 0;
  const double before = f.packets;
  f.packets += static_cast<double>(bytes) / kPacketBytes;
  if (!s.random_loss) {
    int64_t k = 0;
    for (; f.packets >= f.next_loss; f.next_loss += 1 / s.loss) ++k;
    return k;
  }
  const auto whole = static_cast<int64_t>(std::floor(f.packets) - std::floor(before));
  return whole > 0 ? std::binomial_distribution<int64_t>(whole, s.loss)(f.rng) : 0;
}

}  // namespace

struct Relay::State {
  std::vector<int> listeners;
  std::vector<std::string> addresses;
  std::vector<SocketAddress> targets;
  int wake_fd = -1;
};

// The event loop: owned by the thread in run().
struct Relay::Loop {
  Relay& relay;
  const RelayOptions& options;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::vector<LinkState> links;
  std::map<std::string, Bucket> buckets;
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<LinkStats> stats;
  uint64_t flows_made = 0;
  size_t rotate = 0;
  double published = -1;

  explicit Loop(Relay& r) : relay(r), options(r.options_), links(r.options_.links.size()) {
    for (const auto& [name, bps] : options.buckets) {
      if (!(bps > 0) || !std::isfinite(bps)) continue;
      const double rate = bps / 8, burst = std::max(2.0 * kQuantum, rate * kBurstS);
      buckets[name] = {/*rate=*/rate, /*burst=*/burst, /*tokens=*/burst};
    }
    stats = r.stats();
  }

  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }

  void init_flow(Flow& f, int src, int dst, const DirectionShape& shape, DirectionStats& st) {
    f.src = src;
    f.dst = dst;
    f.shape = &shape;
    f.stats = &st;
    f.rng.seed(options.seed * 0x9e3779b97f4a7c15ULL + ++flows_made);
    for (const auto& name : shape.buckets) {
      auto it = buckets.find(name);
      if (it != buckets.end()) f.buckets.push_back(&it->second);
    }
    // Evenly spaced losses start one spacing in, the same on every flow: directions that
    // carry the same bytes stall in step, as the model's mean charges each transfer once.
    if (shape.loss > 0) f.next_loss = 1 / shape.loss;
  }

  void close_conn(Conn& c, bool reset) {
    if (c.dead) return;
    c.dead = true;
    for (int fd : {c.client, c.server}) {
      if (fd < 0) continue;
      if (reset) reset_close(fd);
      else close(fd);
    }
  }

  void accept_all(size_t link) {
    const LinkSpec& spec = options.links[link];
    for (;;) {
      const int fd = accept4(relay.state_->listeners[link], nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that vanished meanwhile
      prepare(fd);
      if (links[link].down && !spec.blackhole) {
        reset_close(fd);
        ++stats[link].reset;
        continue;
      }
      ++stats[link].accepted;
      bool in_progress = false;
      auto server = start_connect(relay.state_->targets[link], &in_progress);
      if (!server.is_ok()) {
        reset_close(fd);
        ++stats[link].failed;
        continue;
      }
      auto c = std::make_unique<Conn>();
      c->link = link;
      c->client = fd;
      c->server = server.value();
      c->connecting = in_progress;
      init_flow(c->fwd, c->client, c->server, spec.forward, stats[link].forward);
      init_flow(c->bwd, c->server, c->client, spec.backward, stats[link].backward);
      conns.push_back(std::move(c));
    }
  }

  // The cut and periodic-stall schedules at `t`.
  void schedule(double t) {
    for (size_t i = 0; i < links.size(); ++i) {
      const LinkSpec& spec = options.links[i];
      bool down = false;
      for (const Window& w : spec.cuts) down = down || (t >= w.start_s && t < w.end_s);
      if (down != links[i].down) {
        links[i].down = down;
        if (down) {
          ++stats[i].cuts;
          int n = 0;
          if (!spec.blackhole) {
            for (auto& c : conns) {
              if (c->link == i && !c->dead) {
                close_conn(*c, true);
                ++n;
              }
            }
            stats[i].reset += static_cast<uint64_t>(n);
          }
          ATOLL_INFO("relay " << spec.name << ": link down at " << t << " s ("
                              << (spec.blackhole ? "blackhole" : std::to_string(n) + " connections reset") << ")");
        } else {
          ATOLL_INFO("relay " << spec.name << ": link up at " << t << " s");
        }
      }
      const bool stalling = spec.stall_every_s > 0 && t >= spec.stall_every_s &&
                            std::fmod(t, spec.stall_every_s) < spec.stall_s;
      if (stalling && !links[i].stalling) ++stats[i].periodic_stalls;
      links[i].stalling = stalling;
    }
  }

  // Admits one chunk of `f`'s inbox onto its path; false when nothing could be admitted.
  bool admit(Flow& f, const LinkState& ls, double t) {
    if (f.inbox_bytes() == 0 || ls.down) return false;
    if (ls.stalling || t < f.stalled_until) {
      f.paused = true;
      return false;
    }
    size_t n = std::min(f.inbox_bytes(), kQuantum);
    for (Bucket* b : f.buckets) {
      b->refill(t);
      // A stall costs its full length: the stream does not catch up with a burst afterwards
      // (TCP does not either: its window restarts after a loss).
      if (f.paused) b->tokens = std::min(b->tokens, static_cast<double>(kMinAdmit));
      n = std::min(n, static_cast<size_t>(std::max(0.0, std::floor(b->tokens))));
    }
    f.paused = false;
    if (n < std::min(f.inbox_bytes(), kMinAdmit)) return false;
    for (Bucket* b : f.buckets) b->tokens -= static_cast<double>(n);
    const DirectionShape& s = *f.shape;
    const int64_t losses = losses_in(f, n);
    const double stall = static_cast<double>(losses) * s.loss_stall_s;
    if (losses > 0) {
      f.stalled_until = t + stall;  // later bytes wait for the retransmission too
      f.stats->loss_stalls += static_cast<uint64_t>(losses);
      f.stats->loss_stall_s += stall;
    }
    const double jitter = s.jitter_s > 0 ? std::uniform_real_distribution<double>(0, s.jitter_s)(f.rng) : 0;
    Segment seg;
    seg.data.assign(f.inbox.begin() + static_cast<std::ptrdiff_t>(f.inbox_off),
                    f.inbox.begin() + static_cast<std::ptrdiff_t>(f.inbox_off + n));
    f.inbox_off += n;
    seg.due = std::max(f.last_due, t + s.latency_s + jitter) + stall;
    seg.delay = seg.due - t;
    f.last_due = seg.due;
    f.path_bytes += n;
    f.path.push_back(std::move(seg));
    return true;
  }

  // Writes what is due; false when the destination failed.
  bool deliver(Flow& f, double t) {
    while (!f.path.empty() && !f.blocked && f.path.front().due <= t) {
      Segment& s = f.path.front();
      const ssize_t w = send(f.dst, s.data.data() + s.off, s.data.size() - s.off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          f.blocked = true;
          break;
        }
        return false;
      }
      s.off += static_cast<size_t>(w);
      f.path_bytes -= static_cast<size_t>(w);
      f.stats->bytes += static_cast<uint64_t>(w);
      if (s.off == s.data.size()) {
        ++f.stats->chunks;
        f.stats->delay_s += s.delay;
        f.path.pop_front();
      }
    }
    if (f.eof && f.buffered() == 0 && !f.shut) {
      shutdown(f.dst, SHUT_WR);
      f.shut = true;
    }
    return true;
  }

  // Reads from `f.src` what the buffer limit allows; false when the source failed.
  bool receive(Flow& f) {
    if (f.inbox_off > 0 && f.inbox_off * 2 >= f.inbox.size()) {
      f.inbox.erase(f.inbox.begin(), f.inbox.begin() + static_cast<std::ptrdiff_t>(f.inbox_off));
      f.inbox_off = 0;
    }
    const size_t room = std::min(kReadBytes, options.max_buffered_bytes - std::min(options.max_buffered_bytes, f.buffered()));
    if (room == 0) return true;
    const size_t old = f.inbox.size();
    f.inbox.resize(old + room);
    const ssize_t r = recv(f.src, f.inbox.data() + old, room, MSG_DONTWAIT);
    f.inbox.resize(old + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    if (r == 0) f.eof = true;
    if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    return true;
  }

  bool readable(const Flow& f, const LinkState& ls) const {
    return !f.eof && f.buffered() < options.max_buffered_bytes && !ls.down;
  }

  void pump(double t) {
    // Round-robin, one quantum per flow per pass, so flows sharing a bucket share it fairly.
    std::vector<std::pair<Flow*, const LinkState*>> flows;
    for (auto& c : conns) {
      if (c->dead || c->connecting) continue;
      flows.emplace_back(&c->fwd, &links[c->link]);
      flows.emplace_back(&c->bwd, &links[c->link]);
    }
    if (!flows.empty()) {
      std::rotate(flows.begin(), flows.begin() + static_cast<std::ptrdiff_t>(rotate++ % flows.size()), flows.end());
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (auto& [f, ls] : flows) progress = admit(*f, *ls, t) || progress;
    }
    for (auto& c : conns) {
      if (c->dead || c->connecting || links[c->link].down) continue;
      if (!deliver(c->fwd, t) || !deliver(c->bwd, t)) close_conn(*c, true);
      else if (c->fwd.shut && c->bwd.shut) close_conn(*c, false);
    }
    std::erase_if(conns, [](const std::unique_ptr<Conn>& c) { return c->dead; });
  }

  // The next time something becomes due: a delivery, tokens, the end of a stall, a schedule
  // edge. At most one second away.
  double next_event(double t) const {
    double next = t + 1.0;
    for (const auto& c : conns) {
      if (c->connecting || links[c->link].down) continue;
      for (const Flow* f : {&c->fwd, &c->bwd}) {
        if (!f->path.empty() && !f->blocked) next = std::min(next, f->path.front().due);
        if (f->inbox_bytes() == 0 || links[c->link].stalling) continue;
        if (t < f->stalled_until) {
          next = std::min(next, f->stalled_until);
          continue;
        }
        const double need = static_cast<double>(std::min(f->inbox_bytes(), kMinAdmit));
        double wait = 0;
        for (const Bucket* b : f->buckets) {
          const double have = std::min(b->burst, b->tokens + (t - b->last) * b->rate);
          if (have < need) wait = std::max(wait, (need - have) / b->rate);
        }
        next = std::min(next, t + wait + 1e-5);
      }
    }
    for (const LinkSpec& spec : options.links) {
      for (const Window& w : spec.cuts) {
        if (w.start_s > t) next = std::min(next, w.start_s);
        if (w.end_s > t) next = std::min(next, w.end_s);
      }
      if (spec.stall_every_s > 0) {
        const double k = std::floor(t / spec.stall_every_s);
        const double start = (k + 1) * spec.stall_every_s, end = k * spec.stall_every_s + spec.stall_s;
        next = std::min(next, end > t && k >= 1 ? end : start);
      }
    }
    return next;
  }

  void publish(double t, bool force) {
    if (!force && t - published < 0.05) return;
    published = t;
    std::lock_guard<std::mutex> lock(relay.stats_mu_);
    relay.stats_ = stats;
  }

  void run() {
    // fds: the wake fd, then one per listener (1 + link), then each connection's client and
    // server fd (conns[i]: first + 2i, first + 2i + 1; dispatch only appends to conns).
    const size_t first = 1 + relay.state_->listeners.size();
    std::vector<pollfd> fds;
    while (!relay.stop_.load()) {
      const double t = now();
      schedule(t);
      pump(t);

      fds.clear();
      fds.push_back({relay.state_->wake_fd, POLLIN, 0});
      for (int fd : relay.state_->listeners) fds.push_back({fd, POLLIN, 0});
      for (const auto& conn : conns) {
        const Conn& c = *conn;
        const LinkState& ls = links[c.link];
        short ce = 0, se = 0;
        if (c.connecting) {
          se = POLLOUT;
        } else {
          if (readable(c.fwd, ls)) ce |= POLLIN;
          if (c.bwd.blocked) ce |= POLLOUT;
          if (readable(c.bwd, ls)) se |= POLLIN;
          if (c.fwd.blocked) se |= POLLOUT;
        }
        fds.push_back({ce != 0 ? c.client : -1, ce, 0});
        fds.push_back({se != 0 ? c.server : -1, se, 0});
      }
      const double wait = std::max(0.0, next_event(t) - now());
      publish(t, wait >= 0.02);  // before a longer sleep, so stats() is never stale for long
      timespec ts{static_cast<time_t>(wait), static_cast<long>((wait - std::floor(wait)) * 1e9)};
      if (ppoll(fds.data(), fds.size(), &ts, nullptr) <= 0) continue;

      for (size_t k = 0; k < fds.size(); ++k) {
        const short re = fds[k].revents;
        if (re == 0) continue;
        if (k == 0) {
          uint64_t v;
          (void)!read(relay.state_->wake_fd, &v, sizeof v);
          continue;
        }
        if (k < first) {
          accept_all(k - 1);
          continue;
        }
        Conn& c = *conns[(k - first) / 2];
        if (c.dead) continue;
        const bool client = (k - first) % 2 == 0;
        Flow& in = client ? c.fwd : c.bwd;    // reads this socket
        Flow& out = client ? c.bwd : c.fwd;   // writes this socket
        if (!client && c.connecting) {
          if (connect_result(c.server) != 0 || (re & (POLLERR | POLLHUP))) {
            ++stats[c.link].failed;
            close_conn(c, true);
          } else {
            c.connecting = false;
          }
          continue;
        }
        if (re & (POLLOUT | POLLERR | POLLHUP)) out.blocked = false;  // a write will tell
        if ((fds[k].events & POLLIN) && (re & (POLLIN | POLLERR | POLLHUP)) && !receive(in)) close_conn(c, true);
      }
    }
    for (auto& c : conns) close_conn(*c, false);
    conns.clear();
    publish(now(), true);
  }
};

Relay::Relay(RelayOptions options) : options_(std::move(options)), state_(std::make_unique<State>()) {}

Relay::~Relay() {
  for (int fd : state_->listeners) close(fd);
  if (state_->wake_fd >= 0) close(state_->wake_fd);
}

StatusOr<std::unique_ptr<Relay>> Relay::create(RelayOptions options) {
  std::unique_ptr<Relay> r(new Relay(std::move(options)));
  for (const LinkSpec& link : r->options_.links) {
    const std::string where = "relay link '" + link.name + "': ";
    for (const DirectionShape* d : {&link.forward, &link.backward}) {
      if (d->latency_s < 0 || d->jitter_s < 0 || d->loss_stall_s < 0 || !(d->loss >= 0 && d->loss < 1)) {
        return invalid_argument(where + "latency, jitter and stall must be >= 0 and loss in [0, 1)");
      }
      for (const auto& b : d->buckets) {
        if (!r->options_.buckets.count(b)) return invalid_argument(where + "unknown token bucket '" + b + "'");
      }
    }
    for (const Window& w : link.cuts) {
      if (!(w.end_s >= w.start_s)) return invalid_argument(where + "a cut must end after it starts");
    }
    if (link.stall_every_s < 0 || link.stall_s < 0 || (link.stall_every_s > 0 && link.stall_s >= link.stall_every_s)) {
      return invalid_argument(where + "stalls need 0 <= stall_s < stall_every_s");
    }
    auto listen = parse_address(link.listen);
    if (!listen.is_ok()) return Status(listen.status().code(), where + listen.status().message());
    auto target = parse_address(link.target);
    if (!target.is_ok()) return Status(target.status().code(), where + target.status().message());
    auto la = resolve(listen.value().first, listen.value().second, true);
    if (!la.is_ok()) return Status(la.status().code(), where + la.status().message());
    auto ta = resolve(target.value().first, target.value().second, false);
    if (!ta.is_ok()) return Status(ta.status().code(), where + ta.status().message());
    if (target.value().second == 0) return invalid_argument(where + "the target needs a port");
    auto fd = listen_on(la.value());
    if (!fd.is_ok()) return Status(fd.status().code(), where + fd.status().message());
    r->state_->listeners.push_back(fd.value());
    r->state_->addresses.push_back(to_string(local_address(fd.value())));
    r->state_->targets.push_back(ta.value());
    LinkStats& s = r->stats_.emplace_back();
    s.name = link.name;
    s.address = r->state_->addresses.back();
  }
  r->state_->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (r->state_->wake_fd < 0) return Status(StatusCode::kUnavailable, "relay: eventfd failed");
  return r;
}

std::string Relay::address(size_t link) const { return state_->addresses.at(link); }

void Relay::run() { Loop(*this).run(); }

void Relay::stop() {
  stop_.store(true);
  const uint64_t one = 1;
  (void)!write(state_->wake_fd, &one, sizeof one);
}

std::vector<LinkStats> Relay::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

StatusOr<std::pair<std::string, int>> parse_address(const std::string& address) {
  std::string a = address;
  if (a.rfind("tcp://", 0) == 0) a = a.substr(6);
  const auto colon = a.rfind(':');
  if (colon == std::string::npos || colon + 1 == a.size()) {
    return invalid_argument("'" + address + "' is not host:port");
  }
  std::string host = a.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = a.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535) {
    return invalid_argument("'" + address + "': bad port '" + port + "'");
  }
  return std::make_pair(host, std::stoi(port));
}

}  // namespace atl::transport::relay
