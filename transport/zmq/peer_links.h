// The data plane's sockets: one ROUTER bound at this island's data endpoint (inbound data,
// outbound acknowledgements) and one DEALER per peer it sends to (outbound data, inbound
// acknowledgements), connected lazily to the peer's endpoint from the membership.
//
// Each DEALER is a reliable, flow-controlled link:
//   - messages get consecutive link sequence numbers (from 1) when first transmitted;
//   - at most `max_in_flight` are unacknowledged at a time (credits); the rest wait here;
//   - the receiver acknowledges every message it accepts (cumulative link_seq), re-acks
//     duplicates and drops messages after a gap, so after a reconnect that lost messages the
//     sender's retransmission (go-back-N, on a timeout derived from the bytes in flight and
//     the bandwidth) restores the stream without duplicates;
//   - payloads are sent zero-copy from a shared buffer that lives until it is acknowledged.
// A DEALER's routing id is "d<self>:<random nonce>", unique per link, so a restarted island
// never collides with its previous incarnation; a message whose sender id disagrees with
// its link's name is dropped. A new routing id is accepted from whatever link_seq it starts
// at.
//
// With CurveZMQ (ZmqGroupOptions::curve) the ROUTER is a CURVE server, every DEALER
// authenticates its peer by the peer's public key from the membership, and an in-context
// ZAP responder (zap_handler.h) admits only clients whose key belongs to a current member;
// other connections are refused at the handshake (logged once per key) and never reach us.
//
// Byte counters count every frame our sockets send or receive (headers, acks, retransmits
// and rejected garbage included; not ZeroMQ's own framing).
//
// Thread model: owned and used by one thread (the ZmqGroup's I/O thread); only counters()
// and the drop log may be read from other threads. Errors: malformed input is dropped
// through the DropLog; socket errors other than "would block" throw zmq::error_t.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/control_plane.h"
#include "transport/group.h"
#include "transport/zmq/data_wire.h"
#include "transport/zmq/zap_handler.h"
#include "transport/zmq/zmq_group.h"

namespace atl::transport::dataplane {

using Bytes = std::vector<uint8_t>;

// One message to send. The link fills header.link_seq, header.done_below and the checksum.
struct Outbound {
  Header header;
  std::shared_ptr<const Bytes> buffer;  // null when there is no payload (or it is borrowed)
  size_t offset = 0;                    // payload = buffer[offset, offset + length)
  size_t length = 0;
  uint64_t raw_bytes = 0;               // fp32 bytes it stands for (ByteCounters::raw_sent)
  bool hashed = false;                  // payload_hash = checksum_payload(payload) is known
  uint64_t payload_hash = 0;
  // A borrowed payload (buffer null): `length` bytes at `borrowed`, kept alive by `owner`,
  // which nobody writes while any reference to it lives (retransmissions send it again).
  const uint8_t* borrowed = nullptr;
  std::shared_ptr<const void> owner = nullptr;

  const uint8_t* payload() const { return borrowed ? borrowed : buffer ? buffer->data() + offset : nullptr; }
};

// One accepted message (header and checksum valid, in link order).
struct Inbound {
  Header header;
  zmq::message_t payload;
  uint64_t payload_hash = 0;  // checksum_payload(payload), verified on receipt
  const uint8_t* data() const { return static_cast<const uint8_t*>(payload.data()); }
  size_t size() const { return header.payload_len; }
};

class PeerLinks {
 public:
  // From `options`: max_in_flight (unacknowledged messages per peer), the ZeroMQ high-water
  // marks (max(1000, 4 * max_in_flight + 64), above max_in_flight), the ROUTER's
  // ZMQ_MAXMSGSIZE (2 * chunk_bytes + 64 KiB), the retransmission timeout (slack * (latency +
  // bytes / bw) + 1 s, with latency_ms and timeout_slack) and curve (encrypt, and admit
  // members' keys only) with this island's Z85 key pair (checked by the caller). `bandwidth`:
  // the bytes/s estimate (EWMA of the group).
  PeerLinks(zmq::context_t& ctx, int self, const std::string& bind_endpoint, const ZmqGroupOptions& options,
            std::function<double()> bandwidth, DropLog& drops);

  // The bound endpoint as ZeroMQ resolved it (a "*" port becomes the real one).
  std::string endpoint() const { return endpoint_; }

  // Peers' endpoints (and CURVE keys) for the current membership. Links to islands no longer
  // listed, or listed at another endpoint or key, are closed and their queued messages
  // discarded. With curve, only these keys may connect from now on.
  void set_peers(const std::vector<Peer>& members);
  // Queues `msg` for `peer`; sent when the link has credit. A peer without a known endpoint
  // is dropped (with a log line).
  void send(int peer, Outbound msg);
  // Discards queued, not yet transmitted messages for which `stale` returns true.
  void purge(const std::function<bool(const Header&)>& stale);

  // Waits up to `timeout` for any socket or `wake_fd` (an eventfd; -1 = none), then handles
  // what arrived: acks update credits; data messages are acknowledged and handed to
  // `deliver` in link order.
  void poll(std::chrono::milliseconds timeout, int wake_fd,
            const std::function<void(Inbound&)>& deliver);
  // Retransmits links whose oldest unacknowledged message is overdue; returns peers that
  // stayed silent for kSuspectAfter retransmission rounds (once per silence).
  std::vector<int> check_timers(Clock::time_point now);
  Clock::time_point next_timer() const;
  // True when no message waits for credit or for an acknowledgement.
  bool idle() const;

  // Every collective of `group` below `v` has completed here (stamped on its messages; ACKs
  // carry group 0's).
  void set_done_below(uint32_t group, uint64_t v) { done_below_[group] = v; }
  ByteCounters counters() const;

 private:
  struct Sent {
    uint8_t header[kHeaderBytes];
    std::shared_ptr<const void> keep;  // keeps `data` alive
    const uint8_t* data = nullptr;
    size_t length = 0;
    uint64_t link_seq = 0;
  };
  struct OutLink {
    Peer peer;                      // id, endpoint and CURVE key it was made for
    std::unique_ptr<zmq::socket_t> dealer;
    uint64_t next_link_seq = 1;
    std::deque<Outbound> waiting;   // no credit yet
    std::deque<Sent> unacked;       // transmitted, not acknowledged
    Clock::time_point deadline{};   // retransmission deadline of unacked.front()
    Clock::duration backoff{};      // extra time after each retransmission round
    int rounds = 0;                 // retransmission rounds since the last ack
  };

  OutLink& link(int peer);
  void pump(OutLink& l);
  bool transmit(OutLink& l, const Sent& s);
  Clock::duration timeout_for(const OutLink& l) const;
  void receive_router(const std::function<void(Inbound&)>& deliver);
  void receive_dealer(OutLink& l);
  void send_ack(const zmq::message_t& routing_id, uint64_t link_seq);

  zmq::context_t& ctx_;
  int self_;
  const ZmqGroupOptions opts_;
  const std::function<double()> bandwidth_;
  DropLog& drops_;
  std::unique_ptr<ZapHandler> zap_;            // with curve: the ZAP handler of this context
  zmq::socket_t router_;
  std::string endpoint_;
  std::map<int, Peer> peers_;                  // by id: data endpoint and Z85 CURVE public key
  std::map<int, OutLink> links_;
  // By routing id: the link's next link_seq (0 = take the first one seen). The routing id
  // names the sender ("d<sender>:..."), so one link never carries two senders.
  std::map<std::string, uint64_t> inlinks_;
  std::map<uint32_t, uint64_t> done_below_;   // by group
  std::atomic<uint64_t> sent_{0}, received_{0}, raw_sent_{0};
};

}  // namespace atl::transport::dataplane
