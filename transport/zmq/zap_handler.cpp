#include "transport/zmq/zap_handler.h"

#include <zmq_addon.hpp>

#include <algorithm>
#include <iterator>

#include "src/base/log.h"
#include "transport/zmq/curve.h"

namespace atl::transport {

namespace {
constexpr size_t kMaxLoggedKeys = 1024;  // refused keys remembered for "log once"
}

ZapHandler::ZapHandler(zmq::context_t& context, std::vector<std::string> allowed_keys,
                       std::string allowed_dir, std::string log_prefix)
    : socket_(context, zmq::socket_type::rep),
      allowed_keys_(allowed_keys.begin(), allowed_keys.end()),
      allowed_dir_(std::move(allowed_dir)),
      log_prefix_(std::move(log_prefix)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
}

bool ZapHandler::allowed(const std::string& z85) {
  if (allowed_keys_.count(z85)) return true;
  if (allowed_dir_.empty()) return false;
  // Re-read so that a key copied into allowed/ during the run is accepted at once.
  StatusOr<std::vector<std::string>> keys = curve::load_allowed_keys(allowed_dir_);
  if (!keys.is_ok()) {
    ATOLL_WARN(log_prefix_ << "ZAP: cannot read the allow-list: " << keys.status().to_string());
    return false;
  }
  return std::find(keys->begin(), keys->end(), z85) != keys->end();
}

bool ZapHandler::handle_one() {
  std::vector<zmq::message_t> req;
  if (!zmq::recv_multipart(socket_, std::back_inserter(req), zmq::recv_flags::dontwait)) return false;
  // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
  auto text = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
  const std::string request_id = text(1);
  const std::string address = text(3);
  std::string status = "400", status_text = "refused", user_id;
  if (req.size() < 6 || text(0) != "1.0") {
    ATOLL_WARN(log_prefix_ << "ZAP: malformed request (" << req.size() << " frames); refusing");
  } else if (text(5) != "CURVE" || req.size() != 7 || req[6].size() != 32) {
    ATOLL_WARN(log_prefix_ << "ZAP: refusing a " << text(5) << " connection from " << address
                           << ": only CURVE clients may connect");
  } else {
    char z85[41];
    zmq_z85_encode(z85, req[6].data<uint8_t>(), 32);
    if (allowed(z85)) {
      status = "200";
      status_text = "OK";
      user_id = z85;
    } else if (logged_.size() < kMaxLoggedKeys && logged_.insert(z85).second) {
      ATOLL_WARN(log_prefix_ << "refused a connection from " << address << ": CURVE public key " << z85
                             << " is not in the allow-list");
    }
  }
  if (status != "200") ++refused_;
  std::vector<zmq::const_buffer> reply = {
      zmq::buffer(std::string_view("1.0")), zmq::buffer(request_id), zmq::buffer(status),
      zmq::buffer(status_text),             zmq::buffer(user_id),    zmq::buffer(std::string_view())};
  zmq::send_multipart(socket_, reply);
  return true;
}

}  // namespace atl::transport
