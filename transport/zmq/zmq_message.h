// Small helpers over cppzmq shared by the coordinator and the control client: zero-copy
// messages from byte vectors, routed receive/send on a ROUTER, single-frame receive on a
// DEALER, and the CURVE "User-Id" of a received message.
//
// All functions act on one socket and inherit its threading rule (the caller owns it).
// Receives never block (ZMQ_DONTWAIT); an empty optional means nothing was waiting.
#pragma once

#include <zmq.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/zmq/coordinator_state.h"

namespace atl::transport {

// A message owning `bytes` without copying them (freed by ZeroMQ when sent).
zmq::message_t to_message(std::vector<uint8_t>&& bytes);
// A message sharing `bytes` (kept alive until ZeroMQ is done with it).
zmq::message_t to_message(std::shared_ptr<const std::vector<uint8_t>> bytes);

struct InboundMessage {
  std::string routing_id;
  zmq::message_t payload;
  std::string error;  // non-empty: the message had the wrong shape and was discarded
};

// One message from a ROUTER: routing id + exactly one payload frame. A message with more
// frames is read to its end and returned with `error` set (never accumulated in memory).
std::optional<InboundMessage> receive_routed(zmq::socket_t& router);
// Sends each message to its routing id without blocking (a peer over its high-water mark or
// gone loses the message, like a lost packet) and clears `out`.
void send_routed(zmq::socket_t& router, std::vector<Outgoing>& out);

// One single-frame message from a DEALER; multi-frame messages are read to their end and
// returned with `error` set.
std::optional<InboundMessage> receive_single(zmq::socket_t& socket);

// The "User-Id" metadata libzmq attached to `message` (the Z85 CURVE key set by our ZAP
// handler); "" when there is none.
std::string message_user_id(const zmq::message_t& message);

}  // namespace atl::transport
