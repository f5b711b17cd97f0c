// ZmqControlClient's I/O thread: the only code that touches the DEALER. It joins and
// re-joins, heartbeats, sends what callers queued, resends unanswered requests after a
// reconnection or a re-join, and turns replies into results for the waiting callers.
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <mutex>
#include <random>

#include "src/base/log.h"
#include "src/base/log_limiter.h"
#include "transport/zmq/control_client.h"
#include "transport/zmq/zmq_message.h"

namespace atl::transport {

using proto::ErrorCode;
using proto::Message;
using proto::MsgType;

struct ZmqControlClient::Io {
  zmq::context_t context{1};
  zmq::socket_t dealer{context, zmq::socket_type::dealer};
  zmq::socket_t monitor{context, zmq::socket_type::pair};
  zmq::socket_t wake_rx{context, zmq::socket_type::pair};
  zmq::socket_t wake_tx{context, zmq::socket_type::pair};  // callers' end, guarded by mu_
  // I/O thread only:
  Clock::time_point next_join{};
  Clock::time_point next_heartbeat{};
  Clock::time_point next_locate{};
  std::string coordinator;      // the endpoint the DEALER dials (ControlClientOptions::locate)
  bool handshaken = false;      // a handshake succeeded once: the next one is a reconnection
  LogLimiter limiter;
};

namespace {
uint64_t new_session() {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  return r ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

}  // namespace

ZmqControlClient::ZmqControlClient(ControlClientOptions options)
    : options_(std::move(options)), session_(new_session()), io_(std::make_unique<Io>()),
      endpoint_(options_.data_endpoint) {
  Io& io = *io_;
  zmq::socket_t& d = io.dealer;
  d.set(zmq::sockopt::linger, 0);
  d.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
  d.set(zmq::sockopt::sndhwm, 10000);
  d.set(zmq::sockopt::reconnect_ivl, 100);
  d.set(zmq::sockopt::reconnect_ivl_max, 2000);
  d.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(options_.heartbeat_ms));
  d.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(options_.heartbeat_timeout_ms));
  if (options_.curve) {
    d.set(zmq::sockopt::curve_serverkey, options_.curve_server_key);
    d.set(zmq::sockopt::curve_publickey, options_.curve_keys.public_key);
    d.set(zmq::sockopt::curve_secretkey, options_.curve_keys.secret_key);
  } else {
    static std::once_flag warned;
    std::call_once(warned, [] {
      ATOLL_WARN("transport.curve is off: control traffic is neither authenticated nor encrypted; "
                 "use it only on a trusted network");
    });
  }
  const std::string tag = std::to_string(reinterpret_cast<uintptr_t>(this));
  const std::string monitor_addr = "inproc://atoll-control-monitor-" + tag;
  const int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
  if (zmq_socket_monitor(d.handle(), monitor_addr.c_str(), events) != 0) throw zmq::error_t();
  for (zmq::socket_t* s : {&io.monitor, &io.wake_rx, &io.wake_tx}) s->set(zmq::sockopt::linger, 0);
  io.monitor.connect(monitor_addr);
  io.wake_rx.bind("inproc://atoll-control-wake-" + tag);
  io.wake_tx.connect("inproc://atoll-control-wake-" + tag);
  io.coordinator = options_.coordinator;
  d.connect(io.coordinator);
}

void ZmqControlClient::follow_coordinator(Clock::time_point now) {
  Io& io = *io_;
  if (!options_.locate || now < io.next_locate) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!down_since_ || now - *down_since_ < std::chrono::milliseconds(options_.heartbeat_ms)) return;
  }
  io.next_locate = now + std::chrono::milliseconds(500);
  const std::string where = options_.locate();
  if (where.empty() || where == io.coordinator) return;
  ATOLL_INFO("island " << options_.island << ": the coordinator is now at " << where << "; dialling it instead of "
                       << io.coordinator);
  io.dealer.disconnect(io.coordinator);
  io.dealer.connect(where);
  io.coordinator = where;
}

ZmqControlClient::~ZmqControlClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.leave_on_destroy && joined_) {
      one_way_.push_back(
          std::make_shared<const std::vector<uint8_t>>(proto::encode_or_throw({.header = header(MsgType::kLeave, 0)})));
    }
    closing_ = true;
    cv_.notify_all();
    wake();
  }
  if (thread_.joinable()) thread_.join();
}

void ZmqControlClient::wake() {
  // Under mu_. A full pipe means a wake-up is already pending.
  io_->wake_tx.send(zmq::message_t(), zmq::send_flags::dontwait);
}

void ZmqControlClient::run() {
  Io& io = *io_;
  std::vector<zmq::pollitem_t> items = {{io.dealer.handle(), 0, ZMQ_POLLIN, 0},
                                        {io.wake_rx.handle(), 0, ZMQ_POLLIN, 0},
                                        {io.monitor.handle(), 0, ZMQ_POLLIN, 0}};
  bool leaving = false;
  for (;;) {
    try {
      auto now = Clock::now();
      Clock::time_point next;  // the next timer: heartbeat, JOIN retry, or none once lost
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (closing_) {
          leaving = !one_way_.empty();
          break;
        }
        next = !lost_.is_ok() ? now + std::chrono::milliseconds(100) : joined_ ? io.next_heartbeat : io.next_join;
        if (publishing_) next = std::min(next, io.next_join);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
      zmq::poll(items, std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(100)));

      zmq::message_t drained;
      while (io.wake_rx.recv(drained, zmq::recv_flags::dontwait)) {}
      std::vector<zmq::message_t> event;
      while (zmq::recv_multipart(io.monitor, std::back_inserter(event), zmq::recv_flags::dontwait)) {
        if (event.size() == 2 && event[0].size() == 6) {
          uint16_t id;
          uint32_t value;
          std::memcpy(&id, event[0].data(), 2);
          std::memcpy(&value, event[0].data<uint8_t>() + 2, 4);
          on_monitor_event(id, value);
        }
        event.clear();
      }
      for (int i = 0; i < 1000; ++i) {
        std::optional<InboundMessage> in = receive_single(io.dealer);
        if (!in) break;
        Message m;
        Status st = in->error.empty() ? proto::parse(in->payload.data<uint8_t>(), in->payload.size(), &m)
                                      : corrupt(in->error);
        if (!st.is_ok()) {
          uint64_t suppressed = 0;
          if (io.limiter.allow(Clock::now(), &suppressed)) {
            ATOLL_WARN("island " << options_.island << ": dropped a message from the coordinator: "
                                 << st.message() << (suppressed ? " (and more not logged)" : ""));
          }
          continue;
        }
        on_message(m);
      }

      now = Clock::now();
      follow_coordinator(now);
      std::lock_guard<std::mutex> lock(mu_);
      if ((!joined_ || publishing_) && lost_.is_ok() && now >= io.next_join) {
        send_join();
        io.next_join = now + std::chrono::milliseconds(options_.join_retry_ms);
      }
      if (joined_ && now >= io.next_heartbeat) {
        io.dealer.send(to_message(proto::encode_or_throw({.header = header(MsgType::kHeartbeat, 0)})),
                       zmq::send_flags::dontwait);
        io.next_heartbeat = now + std::chrono::milliseconds(options_.heartbeat_ms);
      }
      flush();
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      ATOLL_ERROR("island " << options_.island << ": ZeroMQ error in the control client: " << e.what());
    }
  }
  // Closing: send LEAVE (queued by the destructor) and give it a moment to leave the host.
  try {
    if (leaving) {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& bytes : one_way_) io.dealer.send(to_message(bytes), zmq::send_flags::dontwait);
      one_way_.clear();
    }
    io.dealer.set(zmq::sockopt::linger, leaving ? 500 : 0);
    zmq_socket_monitor(io.dealer.handle(), nullptr, 0);
  } catch (const zmq::error_t&) {
  }
  io.dealer.close();
  io.monitor.close();
  io.wake_rx.close();
}

void ZmqControlClient::send_join() {
  // Under mu_. The epoch we know travels along: a restarted coordinator continues after it.
  const Message m{.header = header(MsgType::kJoin, next_rid_++),
                  .endpoint = endpoint_,
                  .public_key = options_.curve ? options_.curve_keys.public_key : "",
                  .run = options_.run};
  io_->dealer.send(to_message(proto::encode_or_throw(m)), zmq::send_flags::dontwait);
}

void ZmqControlClient::flush() {
  // Under mu_. Nothing but JOIN goes out before the coordinator knows us.
  if (!joined_) return;
  Io& io = *io_;
  while (!one_way_.empty()) {
    if (!io.dealer.send(to_message(one_way_.front()), zmq::send_flags::dontwait)) return;
    one_way_.pop_front();
  }
  for (auto& [rid, r] : requests_) {
    if (r.sent || r.result) continue;
    if (!io.dealer.send(to_message(r.bytes), zmq::send_flags::dontwait)) return;
    r.sent = true;
  }
}

void ZmqControlClient::on_message(const Message& m) {
  const proto::Header& h = m.header;
  if (h.session != session_ || h.island != options_.island) return;  // not for this process
  std::lock_guard<std::mutex> lock(mu_);
  switch (h.type) {
    case MsgType::kJoinAck:
      if (!joined_) {
        joined_ = true;
        ++joins_;
        if (joins_ > 1) ATOLL_INFO("island " << options_.island << ": joined again (epoch " << h.epoch << ")");
        for (auto& [rid, r] : requests_) r.sent = false;  // the coordinator may have lost them
        io_->next_heartbeat = Clock::now() + std::chrono::milliseconds(options_.heartbeat_ms);
      }
      [[fallthrough]];
    case MsgType::kMembership:
      if (m.membership.epoch > membership_.epoch) membership_ = m.membership;
      if (publishing_) {
        for (const Peer& p : membership_.members) {
          if (p.id == options_.island && p.endpoint == endpoint_) publishing_ = false;
        }
      }
      break;
    case MsgType::kAck:
    case MsgType::kPullReply:
    case MsgType::kStoreReply: {
      auto it = requests_.find(h.request_id);
      if (it == requests_.end() || it->second.result) return;  // answered already, or given up
      if (it->second.reply_type != h.type) return;             // not the answer to that request
      it->second.result.emplace(std::vector<uint8_t>(m.bytes.begin(), m.bytes.end()));
      break;
    }
    case MsgType::kError: {
      const Status st(proto::error_status_code(m.error), "coordinator: " + m.text);
      if (m.error == ErrorCode::kUnknownIsland) {
        if (joined_) {
          ATOLL_WARN("island " << options_.island << ": the coordinator no longer knows this island ("
                               << m.text << "); joining again");
          joined_ = false;
          io_->next_join = Clock::now();
        }
        return;  // the request stays queued and is resent after the JOIN
      }
      if (m.error == ErrorCode::kRunEnded) {  // stays joined: it LEAVEs when it is destroyed
        if (run_ended_) return;
        ATOLL_ERROR("island " << options_.island << ": the coordinator ended the run: " << m.text);
        run_ended_ = true;
        lost_ = Status(StatusCode::kPeerLost, "island " + std::to_string(options_.island) +
                                                  ": the coordinator ended the run: " + m.text);
        join_error_ = lost_;
        break;
      }
      if (m.error == ErrorCode::kSuperseded || (m.error == ErrorCode::kRejected && joins_ > 0)) {
        ATOLL_ERROR("island " << options_.island << ": out of the run: " << m.text);
        lost_ = Status(StatusCode::kPeerLost, "island " + std::to_string(options_.island) + " is out of the run: " + m.text);
        joined_ = false;
        break;
      }
      if (m.error == ErrorCode::kRejected) {
        join_error_ = st;
        break;
      }
      auto it = requests_.find(h.request_id);
      if (it == requests_.end() || it->second.result) return;
      it->second.result.emplace(st);
      break;
    }
    default: return;  // island-to-coordinator types: ignored
  }
  cv_.notify_all();
}

void ZmqControlClient::on_monitor_event(uint16_t event, uint32_t value) {
  Io& io = *io_;
  std::lock_guard<std::mutex> lock(mu_);
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      link_problem_.clear();
      auth_problem_.clear();
      if (io.handshaken) {
        if (down_since_) ATOLL_INFO("island " << options_.island << ": reconnected to the coordinator");
        for (auto& [rid, r] : requests_) r.sent = false;  // lost with the old connection, maybe
        // So may records be; the coordinator writes each numbered record once.
        one_way_.insert(one_way_.begin(), kept_records_.begin(), kept_records_.end());
        io.next_heartbeat = io.next_join = Clock::now();
      }
      io.handshaken = true;
      down_since_.reset();
      break;
    case ZMQ_EVENT_DISCONNECTED:
      if (!down_since_ && joined_) {
        ATOLL_WARN("island " << options_.island << ": lost the connection to the coordinator; reconnecting");
      }
      if (!down_since_) down_since_ = Clock::now();
      link_problem_ = "the connection to the coordinator was lost";
      break;
    case ZMQ_EVENT_CONNECT_RETRIED:
      link_problem_ = "nothing accepts connections at " + io.coordinator + " (retrying)";
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: {
      const bool give_up = options_.give_up_when_refused && value == 400 && joins_ == 0;
      if (auth_problem_.empty() && !give_up) {
        ATOLL_WARN("island " << options_.island << ": the coordinator refused this island's CURVE key");
      }
      auth_problem_ = "the coordinator refused this island's CURVE key (ZAP status " + std::to_string(value) +
                      "): is its .pub in the coordinator's <keys_dir>/allowed/?";
      if (give_up && join_error_.is_ok()) {  // connect() returns it (and reports it, once)
        join_error_ = Status(StatusCode::kInvalidArgument, auth_problem_);
        cv_.notify_all();
      }
      break;
    }
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      if (auth_problem_.empty()) {
        ATOLL_WARN("island " << options_.island << ": the ZeroMQ handshake with the coordinator failed");
      }
      auth_problem_ = "the ZeroMQ handshake with the coordinator failed (error " + std::to_string(value) +
                      "): wrong coordinator public key, or CURVE on one side only?";
      break;
    default: break;
  }
}

}  // namespace atl::transport
