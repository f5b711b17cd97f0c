#include "transport/zmq/coordinator.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <mutex>

#include "src/base/log.h"
#include "transport/zmq/coordinator_state.h"
#include "transport/zmq/curve.h"
#include "transport/zmq/protocol.h"
#include "transport/zmq/zap_handler.h"
#include "transport/zmq/zmq_message.h"

namespace atl::transport {

struct Coordinator::Sockets {
  zmq::context_t context{1};
  std::unique_ptr<ZapHandler> zap;  // curve only; bound before the ROUTER
  zmq::socket_t router{context, zmq::socket_type::router};
  zmq::socket_t monitor{context, zmq::socket_type::pair};  // the ROUTER's failed handshakes
  std::atomic<bool> stopping{false};
  uint64_t handshakes_failed = 0;
};

namespace {

Status check_options(const CoordinatorOptions& o) {
  if (o.heartbeat_ms <= 0 || o.heartbeat_timeout_ms <= 0 || o.suspect_heartbeats <= 0) {
    return invalid_argument("coordinator: heartbeat_ms, heartbeat_timeout_ms and suspect_heartbeats must be > 0");
  }
  if (o.expected_islands < 0 || o.expected_islands > proto::kMaxIslandId + 1) {
    return invalid_argument("coordinator: expected_islands out of range");
  }
  if (o.max_message_bytes <= 0 || o.max_push_elements <= 0 || o.max_store_bytes < 0 || o.max_pending < 0) {
    return invalid_argument("coordinator: limits must be positive");
  }
  if (o.curve) {
    if (Status st = curve::available(); !st.is_ok()) return st;
    if (!curve::valid_key_text(o.curve_secret_key)) {
      return invalid_argument("coordinator: curve is on but curve_secret_key is not a 40-character Z85 key");
    }
    for (const std::string& k : o.allowed_keys) {
      if (!curve::valid_key_text(k)) return invalid_argument("coordinator: allowed key '" + k + "' is not Z85");
    }
  }
  return Status::ok();
}

// The loop wakes at least this often to detect failures and expire requests.
std::chrono::milliseconds tick_period(const CoordinatorOptions& o) {
  const int64_t ms = std::min(o.heartbeat_ms, o.heartbeat_timeout_ms) / 10;
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 2, 50));
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)), sockets_(std::make_unique<Sockets>()),
      state_(std::make_unique<CoordinatorState>(options_)) {
  // A restarted coordinator's members are its members from the start: a view read before the
  // loop has heard from anyone must not be empty (the coordinator process ends a run whose
  // members are all gone).
  membership_ = state_->membership();
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::start(CoordinatorOptions options) {
  if (Status st = check_options(options); !st.is_ok()) return st;
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  if (Status st = c->bind(); !st.is_ok()) return st;
  c->thread_ = std::thread([raw = c.get()] { raw->loop(); });
  return c;
}

Status Coordinator::bind() {
  Sockets& s = *sockets_;
  try {
    zmq::socket_t& r = s.router;
    r.set(zmq::sockopt::linger, 0);
    r.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
    r.set(zmq::sockopt::sndhwm, 10000);
    r.set(zmq::sockopt::rcvhwm, 10000);
    if (options_.curve) {
      s.zap = std::make_unique<ZapHandler>(s.context, options_.allowed_keys, options_.keys_dir);
      char pub[41];
      if (zmq_curve_public(pub, options_.curve_secret_key.c_str()) != 0) {
        return invalid_argument("coordinator: cannot derive the public key from curve_secret_key");
      }
      public_key_ = pub;
      r.set(zmq::sockopt::curve_server, 1);
      r.set(zmq::sockopt::curve_secretkey, options_.curve_secret_key);
      r.set(zmq::sockopt::zap_domain, "atoll");
    } else {
      static std::once_flag warned;
      std::call_once(warned, [] {
        ATOLL_WARN("transport.curve is off: control traffic is neither authenticated nor encrypted; "
                   "use it only on a trusted network");
      });
    }
    // Failed handshakes (no CURVE, wrong server key, garbage instead of ZMTP) are reported by
    // libzmq only as monitor events; ZAP refusals are logged by the ZAP handler itself.
    const char* monitor_addr = "inproc://atoll-coordinator-monitor";
    if (zmq_socket_monitor(r.handle(), monitor_addr,
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
      throw zmq::error_t();
    }
    s.monitor.set(zmq::sockopt::linger, 0);
    s.monitor.connect(monitor_addr);
    r.bind(options_.endpoint);
    endpoint_ = r.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status(StatusCode::kUnavailable,
                  "coordinator: cannot bind '" + options_.endpoint + "': " + e.what());
  }
  ATOLL_INFO("coordinator: listening on " << endpoint_ << (options_.curve ? " (CURVE)" : ""));
  return Status::ok();
}

Coordinator::~Coordinator() { stop(); }

void Coordinator::stop() {
  sockets_->stopping = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  changed_.notify_all();
}

Membership Coordinator::membership() const {
  std::lock_guard<std::mutex> lock(mu_);
  return membership_;
}

Membership Coordinator::wait_for_change(uint64_t epoch, Deadline deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  wait_until(changed_, lock, deadline, [&] { return membership_.epoch != epoch || stop_; });
  return membership_;
}

CoordinatorStats Coordinator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Coordinator::store_set(const std::string& key, std::vector<uint8_t> value) {
  std::lock_guard<std::mutex> lock(mu_);
  store_sets_.emplace_back(key, std::move(value));
}

void Coordinator::end_run(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  end_run_ = why;
}

std::vector<std::string> Coordinator::refused_keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_keys_;
}

void Coordinator::loop() {
  Sockets& s = *sockets_;
  CoordinatorState& state = *state_;
  const auto tick = tick_period(options_);
  std::vector<Outgoing> out;
  Clock::time_point next_persist{};
  std::vector<zmq::pollitem_t> items = {{s.router.handle(), 0, ZMQ_POLLIN, 0},
                                        {s.monitor.handle(), 0, ZMQ_POLLIN, 0}};
  if (s.zap) items.push_back({s.zap->socket().handle(), 0, ZMQ_POLLIN, 0});
  // The running state for a restart (CoordinatorOptions::persist): a changed store or
  // membership is saved before the replies that acknowledge it leave; records at most every
  // persist_ms.
  auto persist = [&](bool periodic) {
    if (!options_.persist || !(periodic ? state.dirty() && Clock::now() >= next_persist : state.urgent())) return;
    options_.persist(state.snapshot());
    state.clean();
    next_persist = Clock::now() + std::chrono::milliseconds(options_.persist_ms);
  };
  // Publishes a new membership before the messages that announce it leave, so that whoever
  // hears of an epoch from an island finds it in membership() too.
  auto publish_and_send = [&] {
    persist(false);
    if (state.epoch() != membership_.epoch) {
      std::lock_guard<std::mutex> lock(mu_);
      membership_ = state.membership();
      changed_.notify_all();
    }
    send_routed(s.router, out);
  };

  while (!s.stopping) {
    try {
      zmq::poll(items, tick);
      while (s.zap && s.zap->handle_one()) {}
      std::vector<zmq::message_t> event;
      while (zmq::recv_multipart(s.monitor, std::back_inserter(event), zmq::recv_flags::dontwait)) {
        uint32_t value = 0;
        if (event.size() == 2 && event[0].size() == 6) std::memcpy(&value, event[0].data<uint8_t>() + 2, 4);
        ++s.handshakes_failed;
        state.warn("a peer failed the ZeroMQ handshake (error " + std::to_string(value) +
                       (options_.curve ? "): not a CURVE client, or it has the wrong coordinator key"
                                       : "): a CURVE client talking to a plain coordinator, or not ZeroMQ"),
                   Clock::now());
        event.clear();
      }
      // A bounded batch per wake-up, so that ticks (failure detection) are never starved.
      for (int i = 0; i < 1000; ++i) {
        std::optional<InboundMessage> in = receive_routed(s.router);
        if (!in) break;
        const auto now = Clock::now();
        proto::Message m;
        Status st = in->error.empty() ? proto::parse(in->payload.data<uint8_t>(), in->payload.size(), &m)
                                      : corrupt(in->error);
        if (!st.is_ok()) {
          state.drop(st.message(), now);
          continue;
        }
        state.on_message(in->routing_id, options_.curve ? message_user_id(in->payload) : "", m, now, &out);
        publish_and_send();
      }
      std::vector<std::pair<std::string, std::vector<uint8_t>>> sets;
      std::optional<std::string> end;
      {
        std::lock_guard<std::mutex> lock(mu_);
        sets.swap(store_sets_);
        end.swap(end_run_);
      }
      for (const auto& [key, value] : sets) state.set_by_coordinator(key, value, Clock::now(), &out);
      if (end) state.end_run(*end, &out);
      state.on_tick(Clock::now(), &out);
      publish_and_send();
      persist(true);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      ATOLL_ERROR("coordinator: ZeroMQ error in the loop: " << e.what());
    } catch (const std::exception& e) {
      // Bugs only (peer input cannot throw); keep serving the others.
      ATOLL_ERROR("coordinator: unexpected exception in the loop: " << e.what());
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.dropped = state.dropped();
    stats_.handshakes_refused = (s.zap ? s.zap->refused() : 0) + s.handshakes_failed;
    if (s.zap && s.zap->refused_keys().size() != refused_keys_.size()) {
      refused_keys_.assign(s.zap->refused_keys().begin(), s.zap->refused_keys().end());
    }
    stats_.store_keys = state.store_keys();
  }
  zmq_socket_monitor(s.router.handle(), nullptr, 0);
  s.monitor.close();
  s.router.close();
  s.zap.reset();
}

}  // namespace atl::transport
