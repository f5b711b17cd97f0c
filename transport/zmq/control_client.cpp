#include "transport/zmq/control_client.h"

#include <zmq.hpp>

#include <algorithm>

#include "src/base/log.h"
#include "transport/zmq/zmq_message.h"

namespace atl::transport {

using proto::ErrorCode;
using proto::Message;
using proto::MsgType;

namespace {

Status check_options(const ControlClientOptions& o) {
  if (o.island < 0 || o.island > proto::kMaxIslandId) {
    return invalid_argument("control client: island id " + std::to_string(o.island) + " out of range");
  }
  if (o.heartbeat_ms <= 0 || o.heartbeat_timeout_ms <= 0 || o.join_retry_ms <= 0 || o.request_timeout_ms <= 0) {
    return invalid_argument("control client: heartbeat, join retry and request timeouts must be > 0");
  }
  if (o.data_endpoint.size() > proto::kMaxEndpointBytes) {
    return invalid_argument("control client: data endpoint longer than 256 bytes");
  }
  if (o.run.size() > proto::kMaxRunBytes) return invalid_argument("control client: run text above 64 KiB");
  if (o.curve) {
    if (Status st = curve::available(); !st.is_ok()) return st;
    if (!curve::valid_key_text(o.curve_server_key) || !curve::valid_key_text(o.curve_keys.public_key) ||
        !curve::valid_key_text(o.curve_keys.secret_key)) {
      return invalid_argument("control client: curve is on but a key is missing or not 40-character Z85");
    }
  }
  return Status::ok();
}

Clock::time_point after_ms(int64_t ms) { return Clock::now() + std::chrono::milliseconds(ms); }

uint32_t wait_ms_until(Deadline deadline) {
  if (!deadline) return proto::kWaitForever;
  const int64_t ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 0, proto::kWaitForever - 1));
}

}  // namespace

StatusOr<std::unique_ptr<ZmqControlClient>> ZmqControlClient::connect(ControlClientOptions options,
                                                                      Deadline join_deadline) {
  if (Status st = check_options(options); !st.is_ok()) return st;
  const std::string endpoint = options.coordinator;
  std::unique_ptr<ZmqControlClient> c;
  try {
    c.reset(new ZmqControlClient(std::move(options)));
  } catch (const zmq::error_t& e) {
    return invalid_argument("control client: cannot connect to '" + endpoint + "': " + e.what());
  }
  c->thread_ = std::thread([raw = c.get()] { raw->run(); });
  std::unique_lock<std::mutex> lock(c->mu_);
  wait_until(c->cv_, lock, join_deadline, [&] { return c->joined_ || !c->join_error_.is_ok(); });
  if (c->joined_) return c;
  Status st = c->join_error_;
  if (st.is_ok()) {
    st = Status(StatusCode::kTimeout,
                "island " + std::to_string(c->options_.island) + ": no JOIN_ACK from the coordinator at " +
                    endpoint + " before the join deadline: " +
                    c->link_problem());
  }
  lock.unlock();
  return st;  // `c` is destroyed here: not joined, so no LEAVE
}

std::string ZmqControlClient::link_problem() const {
  if (!auth_problem_.empty()) return auth_problem_;
  if (!link_problem_.empty()) return link_problem_;
  return "is it running and reachable?";
}

proto::Header ZmqControlClient::header(MsgType type, uint64_t rid) const {
  return proto::Header{type, options_.island, membership_.epoch, rid, session_};
}

Membership ZmqControlClient::membership() const {
  std::lock_guard<std::mutex> lock(mu_);
  return membership_;
}

Status ZmqControlClient::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

bool ZmqControlClient::run_ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return run_ended_;
}

uint64_t ZmqControlClient::joins() const {
  std::lock_guard<std::mutex> lock(mu_);
  return joins_;
}

Clock::duration ZmqControlClient::unreachable_for() const {
  std::lock_guard<std::mutex> lock(mu_);
  return down_since_ ? Clock::now() - *down_since_ : Clock::duration::zero();
}

Membership ZmqControlClient::wait_for_change(uint64_t epoch, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_until(cv_, lock, deadline, [&] { return membership_.epoch != epoch || closing_; });
  return membership_;
}

void ZmqControlClient::send_one_way(Message m) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_ || !lost_.is_ok()) return;
  const bool record = m.header.type == MsgType::kRecord;
  m.header = header(m.header.type, record ? next_record_ : 0);
  std::vector<uint8_t> bytes;
  if (Status st = proto::encode(m, &bytes); !st.is_ok()) {
    ATOLL_WARN("island " << options_.island << ": not sent: " << st.message());
    return;
  }
  auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  one_way_.push_back(shared);
  if (record) {
    ++next_record_;
    kept_records_.push_back(std::move(shared));
    if (kept_records_.size() > kKeptRecords) kept_records_.pop_front();
  }
  wake();
}

void ZmqControlClient::suspect(int peer) { send_one_way({.header = {.type = MsgType::kSuspect}, .peer = peer}); }

void ZmqControlClient::record(const std::string& json) {
  send_one_way({.header = {.type = MsgType::kRecord},
                .bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size())});
}

Status ZmqControlClient::publish_endpoint(const std::string& endpoint, Deadline deadline) {
  if (endpoint.empty() || endpoint.size() > proto::kMaxEndpointBytes) {
    return invalid_argument("control client: a published data endpoint must have 1 to 256 bytes");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!lost_.is_ok()) return lost_;
  endpoint_ = endpoint;
  publishing_ = true;  // the I/O thread sends the JOIN when its retry timer is due
  wake();
  wait_until(cv_, lock, deadline, [&] { return !publishing_ || !lost_.is_ok() || closing_; });
  if (!lost_.is_ok()) return lost_;
  if (publishing_) {
    return Status(StatusCode::kTimeout, "island " + std::to_string(options_.island) +
                                            ": the coordinator did not show the data endpoint " + endpoint +
                                            " before the deadline" + (joined_ ? "" : " (not joined: " + link_problem() + ")"));
  }
  return Status::ok();
}

StatusOr<std::vector<uint8_t>> ZmqControlClient::request(Message m, MsgType reply_type, Deadline deadline,
                                                         const std::string& what, bool* answered) {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (!lost_.is_ok()) return lost_;
  if (closing_) return Status(StatusCode::kUnavailable, what + ": the control client is closing");
  const uint64_t rid = next_rid_++;
  m.header = header(m.header.type, rid);
  lock.unlock();
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  if (Status st = proto::encode(m, bytes.get()); !st.is_ok()) return st;
  lock.lock();
  Request& r = requests_[rid];
  r.bytes = std::move(bytes);
  r.reply_type = reply_type;
  wake();
  wait_until(cv_, lock, deadline, [&] { return r.result || !lost_.is_ok() || closing_; });
  Request done = std::move(r);
  requests_.erase(rid);
  if (answered) *answered = done.result.has_value();
  if (done.result) return std::move(*done.result);
  if (!lost_.is_ok()) return lost_;
  if (closing_) return Status(StatusCode::kUnavailable, what + ": the control client is closing");
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return Status(StatusCode::kTimeout, what + ": no answer from the coordinator within " + std::to_string(waited) +
                                          " ms" + (joined_ ? "" : " (not joined: " + link_problem() + ")"));
}

Status ZmqControlClient::push(uint64_t tag, std::vector<uint8_t> frame, double weight) {
  return request({.header = {.type = MsgType::kPush}, .tag = tag, .weight = weight, .bytes = frame}, MsgType::kAck,
                 after_ms(options_.request_timeout_ms), "push tag " + std::to_string(tag))
      .status();
}

StatusOr<std::vector<uint8_t>> ZmqControlClient::pull(uint64_t tag, Deadline deadline) {
  return request({.header = {.type = MsgType::kPull}, .tag = tag, .wait_ms = wait_ms_until(deadline)},
                 MsgType::kPullReply, deadline, "pull tag " + std::to_string(tag));
}

Status ZmqControlClient::store_set(const std::string& key, std::vector<uint8_t> value) {
  return request({.header = {.type = MsgType::kStoreSet}, .key = key, .bytes = value}, MsgType::kAck,
                 after_ms(options_.request_timeout_ms), "store_set '" + key + "'")
      .status();
}

StatusOr<std::vector<uint8_t>> ZmqControlClient::store_get(const std::string& key, Deadline deadline) {
  return request({.header = {.type = MsgType::kStoreGet}, .wait_ms = wait_ms_until(deadline), .key = key},
                 MsgType::kStoreReply, deadline, "store_get '" + key + "'");
}

StatusOr<std::optional<std::vector<uint8_t>>> ZmqControlClient::store_peek(const std::string& key) {
  bool answered = false;
  auto r = request({.header = {.type = MsgType::kStoreGet}, .key = key},  // wait_ms 0
                   MsgType::kStoreReply, after_ms(options_.request_timeout_ms), "store_get '" + key + "'", &answered);
  if (r.is_ok()) return std::optional<std::vector<uint8_t>>(std::move(r.value()));
  // With wait_ms 0 the coordinator's ERROR timeout means: not set.
  if (answered && r.status().code() == StatusCode::kTimeout) return std::optional<std::vector<uint8_t>>();
  return r.status();
}

}  // namespace atl::transport
