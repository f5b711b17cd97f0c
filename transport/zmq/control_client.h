// An island's ControlPlane over ZeroMQ: a DEALER socket to the coordinator
// (transport/zmq/coordinator.h), speaking transport/zmq/protocol.h.
//
// connect() joins (resending JOIN until acknowledged or the deadline passes) and returns a
// client that then:
//   - heartbeats every heartbeat_ms;
//   - keeps the membership the coordinator pushes (wait_for_change wakes on each new epoch);
//   - runs push / pull / store_set / store_get as requests with ids and deadlines; record and
//     suspect are one-way messages (record never blocks the training loop);
//   - survives a transient network loss: ZeroMQ redials TCP by itself, requests still
//     unanswered are resent once the connection is back (the coordinator applies a resent
//     PUSH once), and when the coordinator no longer knows the island (declared it dead, or
//     restarted without the run's state) the client JOINs again with the same session, which
//     starts a new epoch. Records are numbered and the newest are resent after a
//     reconnection: a coordinator restarted with the run's state writes each once.
// If another process joins with the same island id, this client is superseded: every call
// then fails with kPeerLost and heartbeats stop.
//
// Threads: one internal I/O thread owns the DEALER; callers hand it work through a
// mutex-guarded queue and a wake-up inproc PAIR, and wait on a condition variable. Every
// public method is thread-safe. The destructor sends LEAVE (unless leave_on_destroy is false),
// stops and joins the I/O thread; calls still waiting then return kUnavailable.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/status.h"
#include "transport/control_plane.h"
#include "transport/zmq/curve.h"
#include "transport/zmq/protocol.h"

namespace atl::transport {

struct ControlClientOptions {
  std::string coordinator = "tcp://127.0.0.1:29500";  // the coordinator's endpoint
  int island = -1;                   // this island's id, >= 0
  std::string data_endpoint;         // published to the peers in the membership ("" = none)
  // Which run this island belongs to, in JOIN: the coordinator refuses an island whose text
  // is not its own (CoordinatorOptions::run). Opaque here, at most 64 KiB.
  std::string run;
  int64_t heartbeat_ms = 500;        // heartbeat period
  // ZeroMQ-level keepalive: a connection silent for this long is dropped and redialled (a
  // half-open TCP connection after a partition is noticed). Same value as the coordinator's.
  int64_t heartbeat_timeout_ms = 5000;
  int64_t join_retry_ms = 500;       // JOIN is resent this often until acknowledged
  int64_t request_timeout_ms = 60000;  // push / store_set wait this long for the acknowledgement
  bool leave_on_destroy = true;      // false: vanish without LEAVE, like a crash (tests)
  // true: connect() returns at once (kInvalidArgument) when the coordinator's allow-list
  // refuses this island's CURVE key (ZAP status 400) before it ever joined, instead of
  // retrying until the join deadline in case the key is allowed meanwhile (`atoll island`
  // sets it: a refused island exits at once).
  bool give_up_when_refused = false;

  // CurveZMQ: encrypt, and authenticate both ways.
  bool curve = false;
  std::string curve_server_key;      // Z85 public key of the coordinator
  curve::KeyPair curve_keys;         // this island's pair (curve::load_keypair(dir, "island-K"))

  int64_t max_message_bytes = int64_t{1} << 30;  // larger incoming messages drop the connection

  // Where the coordinator is now, for a coordinator that may come back at another address
  // (found through the run directory, docs/slurm.md "The coordinator's address"); empty:
  // `coordinator` is fixed. While the connection has been down for a heartbeat period, the
  // I/O thread asks it every 500 ms and, for an endpoint other than the one it dials, drops
  // that one and dials the new one (then resends as after any reconnection). It returns ""
  // when it does not know; it must not block.
  std::function<std::string()> locate;
};

class ZmqControlClient final : public ControlPlane {
 public:
  // Connects and joins; blocks until the coordinator acknowledged the JOIN or `join_deadline`
  // passes. kInvalidArgument for bad options or a JOIN the coordinator refused (id out of
  // range, key mismatch), and with give_up_when_refused for a refused CURVE key; kTimeout
  // when no JOIN_ACK came, naming the likely cause (nothing listening, or the coordinator
  // refused our CURVE key); kUnavailable when CURVE is missing.
  static StatusOr<std::unique_ptr<ZmqControlClient>> connect(ControlClientOptions options,
                                                             Deadline join_deadline);
  ~ZmqControlClient() override;
  ZmqControlClient(const ZmqControlClient&) = delete;
  ZmqControlClient& operator=(const ZmqControlClient&) = delete;

  int self() const override { return options_.island; }
  Membership membership() const override;
  Membership wait_for_change(uint64_t epoch, Deadline deadline) override;
  void suspect(int peer) override;

  // Waits options.request_timeout_ms for the coordinator's acknowledgement.
  Status push(uint64_t tag, std::vector<uint8_t> frame, double weight) override;
  StatusOr<std::vector<uint8_t>> pull(uint64_t tag, Deadline deadline) override;
  Status store_set(const std::string& key, std::vector<uint8_t> value) override;
  StatusOr<std::vector<uint8_t>> store_get(const std::string& key, Deadline deadline) override;
  // A STORE_GET the coordinator answers at once (wait_ms 0): the value, or nullopt when the
  // key is not set. Waits request_timeout_ms for the answer (then kTimeout).
  StatusOr<std::optional<std::vector<uint8_t>>> store_peek(const std::string& key);
  // One-way; a record that breaks the protocol's rules (not one JSON object on one line, or
  // above 1 MiB) is logged and dropped.
  void record(const std::string& json) override;

  // Publishes `endpoint` as this island's data endpoint: a JOIN of the same session that
  // carries it, resent every join_retry_ms, until the membership shows it (a new epoch) or
  // `deadline` passes. A client that joined without one (data_endpoint "") is a member of the
  // control plane only, and takes part in no collective until then (in_collectives(); an
  // island that rejoins a running run first waits for its state hand-over). Later re-JOINs
  // carry the new endpoint. kInvalidArgument for an empty or too long endpoint, kTimeout, or
  // the lost status.
  Status publish_endpoint(const std::string& endpoint, Deadline deadline);

  // ok while this island is part of the run; kPeerLost once another process joined with its
  // id, a re-JOIN was refused, or the coordinator ended the run (run_ended()). Final: the
  // client does not recover from it.
  Status status() const;
  // Whether the coordinator ended the run (ERROR run_ended): the island stops, and does not
  // join again.
  bool run_ended() const;
  // Times this client joined (1 after connect; more after re-joins). For logs and tests.
  uint64_t joins() const;
  // How long the connection to the coordinator has been down (zero while it is up): the
  // island decides how long it waits for a coordinator to come back (restarted).
  Clock::duration unreachable_for() const;

 private:
  struct Io;  // the ZeroMQ context and sockets; the I/O thread's
  struct Request {
    std::shared_ptr<const std::vector<uint8_t>> bytes;  // encoded, kept for resending
    proto::MsgType reply_type = proto::MsgType::kAck;
    bool sent = false;
    // Once answered: the PULL_REPLY frame / STORE_REPLY value (empty for ACK), or the ERROR.
    std::optional<StatusOr<std::vector<uint8_t>>> result;
  };

  explicit ZmqControlClient(ControlClientOptions options);
  // Sends `m` (header filled here) and waits for the reply until `deadline`. *answered (if
  // given) tells whether the coordinator replied, with the result or an ERROR.
  StatusOr<std::vector<uint8_t>> request(proto::Message m, proto::MsgType reply_type, Deadline deadline,
                                         const std::string& what, bool* answered = nullptr);
  // Queues `m` (header filled here) for the I/O thread; RECORDs are numbered and kept.
  void send_one_way(proto::Message m);
  void wake();

  // I/O thread.
  void run();
  void on_message(const proto::Message& m);
  void on_monitor_event(uint16_t event, uint32_t value);
  void flush();
  void send_join();
  void follow_coordinator(Clock::time_point now);  // ControlClientOptions::locate
  proto::Header header(proto::MsgType type, uint64_t rid) const;  // needs mu_
  std::string link_problem() const;                               // needs mu_

  const ControlClientOptions options_;
  const uint64_t session_;
  std::unique_ptr<Io> io_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  Membership membership_;
  std::string endpoint_;      // the data endpoint JOIN announces (options_.data_endpoint at first)
  bool publishing_ = false;   // publish_endpoint() waits for a membership that shows endpoint_
  bool joined_ = false;       // the coordinator acknowledged us and has not forgotten us since
  uint64_t joins_ = 0;
  Status join_error_;         // an ERROR answer to JOIN (connect() returns it)
  Status lost_;               // superseded, re-JOIN refused, run ended: every call fails with it
  bool run_ended_ = false;
  std::optional<Clock::time_point> down_since_;  // the connection is down since then
  std::string link_problem_;  // the last connection problem, for timeout messages
  std::string auth_problem_;  // the last handshake failure (kept until a handshake succeeds)
  bool closing_ = false;
  uint64_t next_rid_ = 1;
  std::map<uint64_t, Request> requests_;
  std::deque<std::shared_ptr<const std::vector<uint8_t>>> one_way_;  // RECORD, SUSPECT, LEAVE
  // RECORDs carry a sequence number (1, 2, ... in the request id); the newest kKeptRecords are
  // resent after every reconnection, which the coordinator writes once each (a coordinator
  // restarted mid-run gets those it had not saved; docs/protocol.md "Coordinator restart").
  static constexpr size_t kKeptRecords = 4096;
  uint64_t next_record_ = 1;
  std::deque<std::shared_ptr<const std::vector<uint8_t>>> kept_records_;

  std::thread thread_;
};

}  // namespace atl::transport
