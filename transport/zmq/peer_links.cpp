#include "transport/zmq/peer_links.h"

#include <sys/eventfd.h>

#include <zmq_addon.hpp>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <random>
#include <set>

#include "src/base/log.h"

namespace atl::transport::dataplane {

namespace {
constexpr int kMaxBatch = 512;                  // messages handled per socket per poll
constexpr size_t kMaxInLinks = 1 << 16;         // routing ids remembered by the ROUTER
constexpr auto kMaxBackoff = std::chrono::seconds(60);
constexpr int kSuspectAfter = 2;                // retransmission rounds without an ack before suspecting
constexpr int kLingerMs = 0;                    // ZMQ_LINGER: GroupIo's destructor drains the links itself

// ZeroMQ's send and receive high-water marks: above max_in_flight.
int hwm(const ZmqGroupOptions& o) { return std::max(1000, 4 * o.max_in_flight + 64); }

std::string link_routing_id(int self) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof buf, "d%d:%016llx", self, static_cast<unsigned long long>(rng()));
  return buf;
}
}  // namespace

PeerLinks::PeerLinks(zmq::context_t& ctx, int self, const std::string& bind_endpoint,
                     const ZmqGroupOptions& options, std::function<double()> bandwidth, DropLog& drops)
    : ctx_(ctx), self_(self), opts_(options), bandwidth_(std::move(bandwidth)), drops_(drops),
      router_(ctx, zmq::socket_type::router) {
  if (opts_.curve) {
    zap_ = std::make_unique<ZapHandler>(ctx_, std::vector<std::string>{}, "",
                                        "zmq data plane: island " + std::to_string(self_) + ": ");
    router_.set(zmq::sockopt::curve_server, 1);
    router_.set(zmq::sockopt::curve_secretkey, opts_.curve_secret_key);
    router_.set(zmq::sockopt::zap_domain, "atoll-data");
  }
  router_.set(zmq::sockopt::router_handover, 1);
  router_.set(zmq::sockopt::linger, kLingerMs);
  router_.set(zmq::sockopt::sndhwm, hwm(opts_));
  router_.set(zmq::sockopt::rcvhwm, hwm(opts_));
  router_.set(zmq::sockopt::maxmsgsize, 2 * opts_.chunk_bytes + 65536);
  router_.bind(bind_endpoint);
  endpoint_ = router_.get(zmq::sockopt::last_endpoint);
}

void PeerLinks::set_peers(const std::vector<Peer>& members) {
  peers_.clear();
  std::set<std::string> keys;
  for (const Peer& p : members) {
    if (p.id == self_) continue;
    peers_[p.id] = p;
    if (!p.public_key.empty()) keys.insert(p.public_key);
  }
  if (zap_) zap_->set_allowed(std::move(keys));
  std::erase_if(links_, [&](const auto& l) {  // destroying a link closes its DEALER
    auto p = peers_.find(l.first);
    return p == peers_.end() || p->second != l.second.peer;
  });
}

PeerLinks::OutLink& PeerLinks::link(int peer) {
  auto it = links_.find(peer);
  if (it != links_.end()) return it->second;
  OutLink& l = links_[peer];
  l.peer = peers_.at(peer);
  l.dealer = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
  if (opts_.curve) {  // authenticates the peer: only the holder of its secret key can answer
    l.dealer->set(zmq::sockopt::curve_serverkey, l.peer.public_key);
    l.dealer->set(zmq::sockopt::curve_publickey, opts_.curve_public_key);
    l.dealer->set(zmq::sockopt::curve_secretkey, opts_.curve_secret_key);
  }
  l.dealer->set(zmq::sockopt::routing_id, link_routing_id(self_));
  l.dealer->set(zmq::sockopt::sndhwm, hwm(opts_));
  l.dealer->set(zmq::sockopt::rcvhwm, hwm(opts_));
  l.dealer->set(zmq::sockopt::linger, kLingerMs);
  l.dealer->connect(l.peer.endpoint);
  return l;
}

void PeerLinks::send(int peer, Outbound msg) {
  auto drop = [&](const char* reason) {
    drops_.drop(reason, std::string(msg_type_name(msg.header.type)) + " to island " + std::to_string(peer));
  };
  auto p = peers_.find(peer);
  if (p == peers_.end()) return drop("outgoing message to a non-member");
  if (opts_.curve && p->second.public_key.size() != 40) return drop("outgoing message to a member without a CURVE key");
  OutLink& l = link(peer);
  // Counted when handed over, not when pump() transmits it: a collective can complete while
  // its last messages still wait for acknowledgements, and a checkpoint cut then must count
  // them, or a resumed run's raw_sent would depend on timing.
  raw_sent_ += msg.raw_bytes;
  l.waiting.push_back(std::move(msg));
  pump(l);
}

void PeerLinks::purge(const std::function<bool(const Header&)>& stale) {
  for (auto& [id, l] : links_) {
    std::erase_if(l.waiting, [&](const Outbound& m) { return stale(m.header); });
  }
}

Clock::duration PeerLinks::timeout_for(const OutLink& l) const {
  double bytes = 0;
  for (const Sent& s : l.unacked) bytes += static_cast<double>(kHeaderBytes + s.length);
  const double bw = std::max(1.0, bandwidth_ ? bandwidth_() : 125e6);
  return transfer_timeout(opts_.timeout_slack, opts_.latency_ms / 1e3, bytes, bw) + l.backoff;
}

bool PeerLinks::transmit(OutLink& l, const Sent& s) {
  zmq::message_t head(s.header, kHeaderBytes);
  const auto more = s.length ? zmq::send_flags::sndmore : zmq::send_flags::none;
  if (!l.dealer->send(head, more | zmq::send_flags::dontwait)) return false;
  if (s.length) {
    // Zero copy: ZeroMQ keeps a reference to the payload's owner until it has written it.
    auto* keep = new std::shared_ptr<const void>(s.keep);
    zmq::message_t body(const_cast<uint8_t*>(s.data), s.length,
                        [](void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }, keep);
    (void)l.dealer->send(body, zmq::send_flags::none);  // later parts of a message never block
  }
  sent_ += kHeaderBytes + s.length;
  return true;
}

void PeerLinks::pump(OutLink& l) {
  while (!l.waiting.empty() && static_cast<int>(l.unacked.size()) < opts_.max_in_flight) {
    Outbound& m = l.waiting.front();
    Sent s;
    s.data = m.payload();
    s.keep = m.borrowed ? std::move(m.owner) : std::shared_ptr<const void>(std::move(m.buffer));
    s.length = m.length;
    s.link_seq = l.next_link_seq++;
    m.header.link_seq = s.link_seq;
    m.header.done_below = done_below_[m.header.group];
    m.header.payload_len = static_cast<uint32_t>(s.length);
    if (m.hashed) encode_header_hashed(m.header, m.payload_hash, s.header);
    else encode_header(m.header, s.length ? s.data : nullptr, s.header);
    l.waiting.pop_front();
    const bool first = l.unacked.empty();
    l.unacked.push_back(std::move(s));
    // A transmission ZeroMQ refuses (high-water mark) is retried by the retransmission timer.
    (void)transmit(l, l.unacked.back());
    if (first) l.deadline = Clock::now() + timeout_for(l);
  }
}

void PeerLinks::send_ack(const zmq::message_t& routing_id, uint64_t link_seq) {
  Header h;
  h.type = MsgType::kAck;
  h.sender = self_;
  h.link_seq = link_seq;
  h.done_below = done_below_[0];
  uint8_t bytes[kHeaderBytes];
  encode_header(h, nullptr, bytes);
  zmq::message_t rid(routing_id.data(), routing_id.size());
  zmq::message_t head(bytes, kHeaderBytes);
  if (!router_.send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
  (void)router_.send(head, zmq::send_flags::none);
  sent_ += kHeaderBytes;
}

void PeerLinks::poll(std::chrono::milliseconds timeout, int wake_fd,
                     const std::function<void(Inbound&)>& deliver) {
  std::vector<zmq::pollitem_t> items;
  items.push_back({router_.handle(), 0, ZMQ_POLLIN, 0});
  if (wake_fd >= 0) items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
  if (zap_) items.push_back({zap_->socket().handle(), 0, ZMQ_POLLIN, 0});
  std::vector<OutLink*> order;
  for (auto& [id, l] : links_) {
    items.push_back({l.dealer->handle(), 0, ZMQ_POLLIN, 0});
    order.push_back(&l);
  }
  zmq::poll(items.data(), items.size(), timeout);
  size_t i = 0;
  const bool router_ready = items[i++].revents & ZMQ_POLLIN;
  if (wake_fd >= 0 && (items[i++].revents & ZMQ_POLLIN)) {
    eventfd_t v;
    (void)eventfd_read(wake_fd, &v);
  }
  if (zap_ && (items[i++].revents & ZMQ_POLLIN)) {
    for (int n = 0; n < kMaxBatch && zap_->handle_one(); ++n) {}
  }
  for (OutLink* l : order) {
    if (items[i++].revents & ZMQ_POLLIN) receive_dealer(*l);
  }
  if (router_ready) receive_router(deliver);
}

void PeerLinks::receive_router(const std::function<void(Inbound&)>& deliver) {
  for (int n = 0; n < kMaxBatch; ++n) {
    std::vector<zmq::message_t> parts;  // routing id, header, payload
    if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
    const zmq::message_t& rid = parts[0];
    for (size_t k = 1; k < parts.size(); ++k) received_ += parts[k].size();
    if (parts.size() < 2 || parts.size() > 3) {
      drops_.drop("malformed multipart", std::to_string(parts.size() - 1) + " frames after the routing id");
      continue;
    }
    const bool has_payload = parts.size() == 3;
    Header h;
    uint64_t payload_hash = 0;
    Status st = parse_header(parts[1].data<uint8_t>(), parts[1].size(),
                             has_payload ? parts[2].data<uint8_t>() : nullptr,
                             has_payload ? parts[2].size() : 0, &h, &payload_hash);
    if (!st.is_ok()) {
      drops_.drop("invalid header", st.message());
      continue;
    }
    if (h.type == MsgType::kAck || h.link_seq == 0) {
      drops_.drop("not a data message", std::string(msg_type_name(h.type)) + " on the data socket");
      continue;
    }
    std::string key(rid.data<char>(), rid.size());
    std::string prefix = "d";  // (not "d" + ...: GCC 12's -Wstringop-overflow false positive)
    prefix += std::to_string(h.sender);
    prefix += ':';
    if (key.compare(0, prefix.size(), prefix) != 0) {  // atoll's links are named after their island
      drops_.drop("link not named after its sender", "a message claiming island " + std::to_string(h.sender));
      continue;
    }
    if (inlinks_.size() >= kMaxInLinks && !inlinks_.count(key)) inlinks_.clear();
    uint64_t& expected = inlinks_[key];
    if (expected == 0) expected = h.link_seq;
    if (h.link_seq < expected) {  // a retransmitted duplicate: acknowledge again
      send_ack(rid, expected - 1);
      continue;
    }
    if (h.link_seq > expected) {
      drops_.drop("gap in a link (waiting for the retransmission)",
                  "island " + std::to_string(h.sender) + " link_seq " + std::to_string(h.link_seq) +
                      ", expected " + std::to_string(expected));
      continue;
    }
    ++expected;
    send_ack(rid, h.link_seq);
    Inbound m{h, has_payload ? std::move(parts[2]) : zmq::message_t(), payload_hash};
    deliver(m);
  }
}

void PeerLinks::receive_dealer(OutLink& l) {
  bool progress = false;
  for (int n = 0; n < kMaxBatch; ++n) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(*l.dealer, std::back_inserter(parts), zmq::recv_flags::dontwait)) break;
    for (auto& p : parts) received_ += p.size();
    Header h;
    Status st = parts.size() == 1 ? parse_header(parts[0].data<uint8_t>(), parts[0].size(), nullptr, 0, &h)
                                  : corrupt("extra frames after an ACK");
    if (st.is_ok() && (h.type != MsgType::kAck || h.sender != l.peer.id)) {
      st = corrupt("expected an ACK from island " + std::to_string(l.peer.id));
    }
    if (!st.is_ok()) {
      drops_.drop("invalid acknowledgement", st.message());
      continue;
    }
    while (!l.unacked.empty() && l.unacked.front().link_seq <= h.link_seq) {
      l.unacked.pop_front();
      progress = true;
    }
  }
  if (progress) {
    l.rounds = 0;
    l.backoff = {};
    if (!l.unacked.empty()) l.deadline = Clock::now() + timeout_for(l);
    pump(l);
  }
}

std::vector<int> PeerLinks::check_timers(Clock::time_point now) {
  std::vector<int> suspects;
  for (auto& [id, l] : links_) {
    if (l.unacked.empty() || now < l.deadline) continue;
    // Go-back-N: the receiver dropped everything after a gap, so resend the whole window.
    for (const Sent& s : l.unacked) (void)transmit(l, s);
    ++l.rounds;
    l.backoff = std::min<Clock::duration>(kMaxBackoff, l.backoff * 2 + std::chrono::seconds(1));
    l.deadline = now + timeout_for(l);
    ATOLL_DEBUG("zmq data plane: island " << self_ << " retransmits " << l.unacked.size()
                                          << " messages to island " << id);
    if (l.rounds == kSuspectAfter) suspects.push_back(id);
  }
  return suspects;
}

Clock::time_point PeerLinks::next_timer() const {
  Clock::time_point t = Clock::time_point::max();
  for (const auto& [id, l] : links_) {
    if (!l.unacked.empty()) t = std::min(t, l.deadline);
  }
  return t;
}

bool PeerLinks::idle() const {
  for (const auto& [id, l] : links_) {
    if (!l.waiting.empty() || !l.unacked.empty()) return false;
  }
  return true;
}

ByteCounters PeerLinks::counters() const {
  return {sent_.load(), received_.load(), raw_sent_.load()};
}

}  // namespace atl::transport::dataplane
