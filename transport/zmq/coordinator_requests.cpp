// CoordinatorState's request handlers: the hosted server role (PUSH / PULL), the star
// all-reduce (PUSH / PULL under star tags: StarReducer) and the rendezvous store (STORE_SET /
// STORE_GET). Split from coordinator_state.cpp, which keeps membership and failure detection.
#include <ATen/ATen.h>

#include <iterator>

#include "compression/frame.h"
#include "src/base/log.h"
#include "transport/star.h"
#include "transport/zmq/coordinator_state.h"

namespace atl::transport {

using proto::ErrorCode;
using proto::Message;
using proto::MsgType;

namespace {
constexpr size_t kAppliedPushMemory = 1024;  // PUSH request ids remembered per island
}

void CoordinatorState::applied(Island& isl, uint64_t rid) {
  isl.applied.insert(rid);
  isl.applied_order.push_back(rid);
  if (isl.applied_order.size() > kAppliedPushMemory) {
    isl.applied.erase(isl.applied_order.front());
    isl.applied_order.pop_front();
  }
}

void CoordinatorState::on_star_push(int id, Island& isl, const Message& m, std::vector<Outgoing>* out) {
  const uint64_t rid = m.header.request_id;
  if (!isl.applied.count(rid)) {  // a resent PUSH is acknowledged again, not applied again
    star_.on_push(id, m.tag, m.bytes, m.weight, collective_members(membership()));
    applied(isl, rid);
  }
  // Its outcome (a failed contribution too) reaches the island through its PULL.
  out->push_back({isl.routing_id, reply(MsgType::kAck, id, isl.session, rid)});
  answer_pulls(out, /*star_only=*/true);
}

void CoordinatorState::on_push(int id, Island& isl, const Message& m, std::vector<Outgoing>* out) {
  if (star::is_star_tag(m.tag)) return on_star_push(id, isl, m, out);
  const uint64_t rid = m.header.request_id;
  auto fail = [&](ErrorCode code, const std::string& why) {
    out->push_back({isl.routing_id, error(id, isl.session, rid, code, why)});
  };
  if (options_.server == nullptr) return fail(ErrorCode::kNoServer, "this run's coordinator hosts no server role");
  if (isl.applied.count(rid)) {  // resent after a reconnect; applied once already
    return out->push_back({isl.routing_id, reply(MsgType::kAck, id, isl.session, rid)});
  }
  compression::FrameView view;
  if (Status st = compression::parse_frame(m.bytes.data(), m.bytes.size(), &view); !st.is_ok()) {
    warn("PUSH from island " + std::to_string(id) + ": " + st.message(), Clock::now());
    return fail(ErrorCode::kCorrupt, st.message());
  }
  if (view.header.elements > static_cast<uint64_t>(options_.max_push_elements)) {
    return fail(ErrorCode::kLimit, "PUSH of " + std::to_string(view.header.elements) +
                                       " elements exceeds the coordinator's max_push_elements");
  }
  at::Tensor payload = at::empty({static_cast<int64_t>(view.header.elements)}, at::kFloat);
  if (Status st = options_.pipeline.decode(m.bytes.data(), m.bytes.size(), payload); !st.is_ok()) {
    warn("PUSH from island " + std::to_string(id) + ": " + st.message(), Clock::now());
    return fail(ErrorCode::kCorrupt, st.message());
  }
  server_time(Clock::now(), out);  // a deadline that passed first closes its round
  try {
    options_.server->on_push(id, m.tag, payload, m.weight);
  } catch (const std::exception& e) {
    ATOLL_ERROR("coordinator: the server role threw on a PUSH from island " << id << " tag " << m.tag
                                                                             << ": " << e.what());
    return fail(ErrorCode::kInternal, std::string("server role: ") + e.what());
  }
  applied(isl, rid);
  urgent_ = true;  // the server's state changed: saved (CoordinatorOptions::persist) before the ACK leaves
  out->push_back({isl.routing_id, reply(MsgType::kAck, id, isl.session, rid)});
  answer_pulls(out);
}

std::optional<std::vector<uint8_t>> CoordinatorState::try_pull(int id, const Island& isl, uint64_t tag,
                                                               uint64_t rid) {
  if (star::is_star_tag(tag)) {
    std::optional<std::span<const uint8_t>> result = star_.on_pull(id, tag);
    if (!result) return std::nullopt;
    return reply(MsgType::kPullReply, id, isl.session, rid, {.tag = tag, .bytes = *result});
  }
  try {
    std::optional<at::Tensor> answer = options_.server->on_pull(id, tag);
    if (!answer) return std::nullopt;
    std::vector<uint8_t> frame;
    options_.pipeline.encode(answer->to(at::kFloat).contiguous().view({-1}), frame);
    return reply(MsgType::kPullReply, id, isl.session, rid, {.tag = tag, .bytes = frame});
  } catch (const std::exception& e) {
    ATOLL_ERROR("coordinator: the server role failed on a PULL from island " << id << " tag " << tag
                                                                              << ": " << e.what());
    return error(id, isl.session, rid, ErrorCode::kInternal, std::string("server role: ") + e.what());
  }
}

void CoordinatorState::answer_pulls(std::vector<Outgoing>* out, bool star_only) {
  answer_pending(out, [&](const Pending& p, const Island& isl) -> std::optional<std::vector<uint8_t>> {
    if (p.type != MsgType::kPull || (star_only && !star::is_star_tag(p.tag))) return std::nullopt;
    return try_pull(p.island, isl, p.tag, p.request_id);
  });
}

void CoordinatorState::on_pull(int id, Island& isl, const Message& m, Clock::time_point now,
                               std::vector<Outgoing>* out) {
  const uint64_t rid = m.header.request_id;
  if (options_.server == nullptr && !star::is_star_tag(m.tag)) {
    return out->push_back({isl.routing_id, error(id, isl.session, rid, ErrorCode::kNoServer,
                                                 "this run's coordinator hosts no server role")});
  }
  if (!star::is_star_tag(m.tag)) server_time(now, out);
  if (std::optional<std::vector<uint8_t>> answer = try_pull(id, isl, m.tag, rid)) {
    out->push_back({isl.routing_id, std::move(*answer)});
  } else {
    wait_or_fail(isl, Pending{id, isl.session, rid, MsgType::kPull, m.tag, "", std::nullopt}, m.wait_ms, now, out);
  }
}

bool CoordinatorState::store_put(const std::string& key, std::span<const uint8_t> bytes,
                                 std::vector<Outgoing>* out) {
  auto old = store_.find(key);
  const size_t freed = old == store_.end() ? 0 : old->first.size() + old->second.size();
  const size_t needed = key.size() + bytes.size();
  if (store_bytes_ - freed + needed > static_cast<size_t>(options_.max_store_bytes)) return false;
  store_bytes_ = store_bytes_ - freed + needed;
  if (!transient(key)) urgent_ = true;
  std::vector<uint8_t>& value = store_[key];
  value.assign(bytes.begin(), bytes.end());
  answer_pending(out, [&](const Pending& p, const Island&) -> std::optional<std::vector<uint8_t>> {
    if (p.type != MsgType::kStoreGet || p.key != key) return std::nullopt;
    return reply(MsgType::kStoreReply, p.island, p.session, p.request_id, {.bytes = value});
  });
  return true;
}

void CoordinatorState::on_store_set(int id, Island& isl, const Message& m, std::vector<Outgoing>* out) {
  const uint64_t rid = m.header.request_id;
  std::vector<Outgoing> answers;  // the waiters' replies go out after the setter's ACK
  if (!store_put(m.key, m.bytes, &answers)) {
    return out->push_back({isl.routing_id, error(id, isl.session, rid, ErrorCode::kLimit,
                                                 "the rendezvous store is full (max_store_bytes)")});
  }
  out->push_back({isl.routing_id, reply(MsgType::kAck, id, isl.session, rid)});
  out->insert(out->end(), std::make_move_iterator(answers.begin()), std::make_move_iterator(answers.end()));
  if (options_.on_store_set) options_.on_store_set(id, m.key, m.bytes);
}

void CoordinatorState::set_by_coordinator(const std::string& key, const std::vector<uint8_t>& value,
                                          Clock::time_point now, std::vector<Outgoing>* out) {
  if (!store_put(key, value, out)) warn("the rendezvous store is full: key '" + key + "' not set", now);
}

void CoordinatorState::on_store_get(int id, Island& isl, const Message& m, Clock::time_point now,
                                    std::vector<Outgoing>* out) {
  const uint64_t rid = m.header.request_id;
  if (auto it = store_.find(m.key); it != store_.end()) {
    out->push_back({isl.routing_id, reply(MsgType::kStoreReply, id, isl.session, rid, {.bytes = it->second})});
  } else {
    wait_or_fail(isl, Pending{id, isl.session, rid, MsgType::kStoreGet, 0, m.key, std::nullopt}, m.wait_ms, now, out);
  }
}

}  // namespace atl::transport
