#include "transport/zmq/zmq_message.h"

namespace atl::transport {

zmq::message_t to_message(std::vector<uint8_t>&& bytes) {
  auto* owned = new std::vector<uint8_t>(std::move(bytes));
  return zmq::message_t(
      owned->data(), owned->size(),
      [](void*, void* hint) { delete static_cast<std::vector<uint8_t>*>(hint); }, owned);
}

zmq::message_t to_message(std::shared_ptr<const std::vector<uint8_t>> bytes) {
  auto* keep = new std::shared_ptr<const std::vector<uint8_t>>(std::move(bytes));
  return zmq::message_t(
      const_cast<uint8_t*>((*keep)->data()), (*keep)->size(),
      [](void*, void* hint) { delete static_cast<std::shared_ptr<const std::vector<uint8_t>>*>(hint); },
      keep);
}

std::optional<InboundMessage> receive_routed(zmq::socket_t& router) {
  zmq::message_t id;
  if (!router.recv(id, zmq::recv_flags::dontwait)) return std::nullopt;
  std::optional<InboundMessage> in = id.more() ? receive_single(router) : std::nullopt;
  if (!in) in.emplace().error = "message without a payload frame";
  in->routing_id = id.to_string();
  return in;
}

void send_routed(zmq::socket_t& router, std::vector<Outgoing>& out) {
  for (Outgoing& o : out) {
    zmq::message_t id(o.routing_id.data(), o.routing_id.size());
    if (!router.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) continue;
    router.send(to_message(std::move(o.bytes)), zmq::send_flags::dontwait);
  }
  out.clear();
}

std::optional<InboundMessage> receive_single(zmq::socket_t& socket) {
  InboundMessage in;
  if (!socket.recv(in.payload, zmq::recv_flags::dontwait)) return std::nullopt;
  if (in.payload.more()) {
    // The rest is read and discarded (the parts of a message arrive together).
    while (in.payload.more() && socket.recv(in.payload, zmq::recv_flags::dontwait)) {}
    in.payload.rebuild();
    in.error = "multi-frame message (the control protocol uses one frame per message)";
  }
  return in;
}

std::string message_user_id(const zmq::message_t& message) {
  const char* v = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
  return v ? std::string(v) : std::string();
}

}  // namespace atl::transport
