#include "transport/zmq/peer_links.h"

#include <sys/eventfd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "src/base/log.h"

namespace atl::transport::dataplane {

namespace {
constexpr int kMaxBatch = 512;                  // messages handled per socket per poll
constexpr size_t kMaxInLinks = 1 << 16;         // routing ids remembered by the ROUTER
constexpr auto kMaxBackoff = std::chrono::seconds(60);

std::string link_routing_id(int self) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof buf, "d%d:%016llx", self, static_cast<unsigned long long>(rng()));
  return buf;
}

// Receives the remaining parts of a multipart message into `parts`.
void drain_more(zmq::socket_t& s, bool more, std::vector<zmq::message_t>& parts) {
  while (more) {
    zmq::message_t m;
    (void)s.recv(m, zmq::recv_flags::none);  // the rest of a message is already queued
    more = m.more();
    parts.push_back(std::move(m));
  }
}
}  // namespace

PeerLinks::PeerLinks(zmq::context_t& ctx, int self, const std::string& bind_endpoint,
                     LinkOptions opts, DropLog& drops)
    : ctx_(ctx), self_(self), opts_(std::move(opts)), drops_(drops),
      router_(ctx, zmq::socket_type::router) {
  if (opts_.curve) {
    zap_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::rep);
    zap_->set(zmq::sockopt::linger, 0);
    zap_->bind("inproc://zeromq.zap.01");
    router_.set(zmq::sockopt::curve_server, 1);
    router_.set(zmq::sockopt::curve_secretkey, opts_.curve_secret_key);
    router_.set(zmq::sockopt::zap_domain, "atoll-data");
  }
  router_.set(zmq::sockopt::router_handover, 1);
  router_.set(zmq::sockopt::linger, opts_.linger_ms);
  router_.set(zmq::sockopt::sndhwm, opts_.send_hwm);
  router_.set(zmq::sockopt::rcvhwm, opts_.send_hwm);
  if (opts_.max_message_bytes > 0) router_.set(zmq::sockopt::maxmsgsize, opts_.max_message_bytes);
  router_.bind(bind_endpoint);
  endpoint_ = router_.get(zmq::sockopt::last_endpoint);
}

PeerLinks::~PeerLinks() {
  for (auto& [id, l] : links_) close(l);
}

void PeerLinks::set_peers(const std::vector<Peer>& members) {
  endpoints_.clear();
  keys_.clear();
  allowed_keys_.clear();
  for (const Peer& p : members) {
    if (p.id == self_) continue;
    endpoints_[p.id] = p.endpoint;
    keys_[p.id] = p.public_key;
    if (!p.public_key.empty()) allowed_keys_.insert(p.public_key);
  }
  for (auto it = links_.begin(); it != links_.end();) {
    auto e = endpoints_.find(it->first);
    if (e == endpoints_.end() || e->second != it->second.endpoint || keys_[it->first] != it->second.key) {
      close(it->second);
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
}

PeerLinks::OutLink& PeerLinks::link(int peer) {
  auto it = links_.find(peer);
  if (it != links_.end()) return it->second;
  OutLink& l = links_[peer];
  l.peer = peer;
  l.endpoint = endpoints_.at(peer);
  l.key = keys_[peer];
  l.dealer = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
  if (opts_.curve) {  // authenticates the peer: only the holder of its secret key can answer
    l.dealer->set(zmq::sockopt::curve_serverkey, l.key);
    l.dealer->set(zmq::sockopt::curve_publickey, opts_.curve_public_key);
    l.dealer->set(zmq::sockopt::curve_secretkey, opts_.curve_secret_key);
  }
  l.dealer->set(zmq::sockopt::routing_id, link_routing_id(self_));
  l.dealer->set(zmq::sockopt::sndhwm, opts_.send_hwm);
  l.dealer->set(zmq::sockopt::rcvhwm, opts_.send_hwm);
  l.dealer->set(zmq::sockopt::linger, opts_.linger_ms);
  l.dealer->connect(l.endpoint);
  return l;
}

void PeerLinks::close(OutLink& l) {
  if (l.dealer) l.dealer->close();
  l.dealer.reset();
  l.waiting.clear();
  l.unacked.clear();
}

void PeerLinks::send(int peer, Outbound msg) {
  if (!endpoints_.count(peer)) {
    drops_.drop("outgoing message to a non-member",
                std::string(msg_type_name(msg.header.type)) + " to island " + std::to_string(peer));
    return;
  }
  if (opts_.curve && keys_[peer].size() != 40) {
    drops_.drop("outgoing message to a member without a CURVE key",
                std::string(msg_type_name(msg.header.type)) + " to island " + std::to_string(peer));
    return;
  }
  OutLink& l = link(peer);
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
  const double bw = std::max(1.0, opts_.bandwidth ? opts_.bandwidth() : 125e6);
  const double secs = opts_.timeout_slack * (opts_.latency_s + bytes / bw) + 1.0;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs)) +
         l.backoff;
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
    raw_sent_ += m.raw_bytes;
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
  if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
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
  if (zap_ && (items[i++].revents & ZMQ_POLLIN)) answer_zap();
  for (OutLink* l : order) {
    if (items[i++].revents & ZMQ_POLLIN) receive_dealer(*l);
  }
  if (router_ready) receive_router(deliver);
}

void PeerLinks::receive_router(const std::function<void(Inbound&)>& deliver) {
  for (int n = 0; n < kMaxBatch; ++n) {
    zmq::message_t rid;
    if (!router_.recv(rid, zmq::recv_flags::dontwait)) return;
    std::vector<zmq::message_t> parts;
    drain_more(router_, rid.more(), parts);
    size_t bytes = 0;
    for (auto& p : parts) bytes += p.size();
    received_ += bytes;
    if (parts.empty() || parts.size() > 2) {
      drops_.drop("malformed multipart", std::to_string(parts.size()) + " frames after the routing id");
      continue;
    }
    const bool has_payload = parts.size() == 2;
    Header h;
    Status st = parse_header(parts[0].data<uint8_t>(), parts[0].size(),
                             has_payload ? parts[1].data<uint8_t>() : nullptr,
                             has_payload ? parts[1].size() : 0, &h);
    if (!st.is_ok()) {
      drops_.drop("invalid header", st.message());
      continue;
    }
    if (h.type == MsgType::kAck || h.link_seq == 0) {
      drops_.drop("not a data message", std::string(msg_type_name(h.type)) + " on the data socket");
      continue;
    }
    std::string key(rid.data<char>(), rid.size());
    const std::string prefix = "d" + std::to_string(h.sender) + ":";
    if (key.compare(0, prefix.size(), prefix) != 0) {  // atoll's links are named after their island
      drops_.drop("link not named after its sender", "a message claiming island " + std::to_string(h.sender));
      continue;
    }
    if (inlinks_.size() >= kMaxInLinks && !inlinks_.count(key)) inlinks_.clear();
    InLink& in = inlinks_[key];
    if (in.sender < 0) in.sender = h.sender;
    if (in.sender != h.sender) {
      drops_.drop("sender changed on a link", "island " + std::to_string(h.sender) +
                                                  " on the link of island " + std::to_string(in.sender));
      continue;
    }
    if (in.expected == 0) in.expected = h.link_seq;
    if (h.link_seq < in.expected) {  // a retransmitted duplicate: acknowledge again
      send_ack(rid, in.expected - 1);
      continue;
    }
    if (h.link_seq > in.expected) {
      drops_.drop("gap in a link (waiting for the retransmission)",
                  "island " + std::to_string(h.sender) + " link_seq " + std::to_string(h.link_seq) +
                      ", expected " + std::to_string(in.expected));
      continue;
    }
    ++in.expected;
    send_ack(rid, h.link_seq);
    Inbound m{h, has_payload ? std::move(parts[1]) : zmq::message_t()};
    deliver(m);
  }
}

// RFC 27: version, request id, domain, address, identity, mechanism, credentials. Admits
// CURVE clients whose public key belongs to a current member.
void PeerLinks::answer_zap() {
  for (int n = 0; n < kMaxBatch; ++n) {
    std::vector<zmq::message_t> req;
    zmq::message_t first;
    if (!zap_->recv(first, zmq::recv_flags::dontwait)) return;
    const bool more = first.more();
    req.push_back(std::move(first));
    drain_more(*zap_, more, req);
    auto text = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
    std::string status = "400", status_text = "not a member", user_id;
    if (req.size() == 7 && text(0) == "1.0" && text(5) == "CURVE" && req[6].size() == 32) {
      char z85[41];
      zmq_z85_encode(z85, req[6].data<uint8_t>(), 32);
      if (allowed_keys_.count(z85)) {
        status = "200";
        status_text = "OK";
        user_id = z85;
      } else if (refused_logged_.size() < 1024 && refused_logged_.insert(z85).second) {
        ATOLL_WARN("zmq data plane: island " << self_ << " refused a connection from " << text(3)
                                             << ": CURVE key " << z85 << " is not a member's");
      }
    } else {
      ATOLL_WARN("zmq data plane: island " << self_ << " refused a " << text(5) << " connection from "
                                           << text(3) << ": only members' CURVE keys may connect");
    }
    std::vector<zmq::message_t> reply;
    reply.emplace_back(std::string_view("1.0"));
    reply.emplace_back(text(1));
    reply.emplace_back(status);
    reply.emplace_back(status_text);
    reply.emplace_back(user_id);
    reply.emplace_back();
    for (size_t k = 0; k < reply.size(); ++k) {
      (void)zap_->send(reply[k], k + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

void PeerLinks::receive_dealer(OutLink& l) {
  bool progress = false;
  for (int n = 0; n < kMaxBatch; ++n) {
    zmq::message_t m;
    if (!l.dealer->recv(m, zmq::recv_flags::dontwait)) break;
    std::vector<zmq::message_t> rest;
    drain_more(*l.dealer, m.more(), rest);
    received_ += m.size();
    for (auto& p : rest) received_ += p.size();
    Header h;
    Status st = rest.empty() ? parse_header(m.data<uint8_t>(), m.size(), nullptr, 0, &h)
                             : corrupt("extra frames after an ACK");
    if (st.is_ok() && (h.type != MsgType::kAck || h.sender != l.peer)) {
      st = corrupt("expected an ACK from island " + std::to_string(l.peer));
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
    if (l.rounds == opts_.suspect_after) suspects.push_back(id);
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
