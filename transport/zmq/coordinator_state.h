// What the coordinator knows and decides, without sockets: the membership table and its
// epoch, failure detection, the rendezvous store, waiting PULL / STORE_GET requests and the
// hosted server role. The Coordinator feeds it parsed messages and clock ticks and sends
// what it returns; keeping the sockets out makes every rule here a plain function of
// (message, time).
//
// Not thread-safe: owned by the coordinator's loop thread. Never throws on peer input
// (exceptions from the server role are caught and answered with ERROR internal).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/base/log_limiter.h"
#include "transport/zmq/coordinator.h"
#include "transport/zmq/protocol.h"
#include "transport/zmq/star_reducer.h"

namespace atl::transport {

// One message to send: to the peer whose ZeroMQ routing id is `routing_id`.
struct Outgoing {
  std::string routing_id;
  std::vector<uint8_t> bytes;
};

class CoordinatorState {
 public:
  // `options` must outlive the state.
  explicit CoordinatorState(const CoordinatorOptions& options);

  // One valid message from the connection `routing_id`; `user_id` is the connection's CURVE
  // public key (Z85), "" without curve. Replies and membership pushes are appended to `out`.
  void on_message(const std::string& routing_id, const std::string& user_id,
                  const proto::Message& message, Clock::time_point now, std::vector<Outgoing>* out);
  // Declares silent islands dead and times out waiting requests.
  void on_tick(Clock::time_point now, std::vector<Outgoing>* out);
  // A message that failed to parse or broke a rule: counted and logged (rate-limited).
  void drop(const std::string& why, Clock::time_point now);
  // A warning through the same rate limit.
  void warn(const std::string& line, Clock::time_point now);
  // Sets a store key on the coordinator's own behalf (Coordinator::store_set): waiting
  // STORE_GETs are answered into `out`. A full store is logged and the key not set.
  void set_by_coordinator(const std::string& key, const std::vector<uint8_t>& value, Clock::time_point now,
                          std::vector<Outgoing>* out);

  // Ends the run for its islands (Coordinator::end_run): ERROR run_ended with `why` to every
  // live island now, and in answer to every JOIN and HEARTBEAT after (a LEAVE is still one).
  void end_run(const std::string& why, std::vector<Outgoing>* out);

  // The state a restarted coordinator starts from (CoordinatorOptions::persist / restore).
  CoordinatorSnapshot snapshot() const;
  // Whether the state changed since clean() (heartbeats and requests that wait change
  // nothing); urgent(): the store or the membership did, which is saved before the replies
  // that acknowledge it leave (records may wait for the next periodic save).
  bool dirty() const { return dirty_ || urgent_; }
  bool urgent() const { return urgent_; }
  void clean() { dirty_ = urgent_ = false; }

  uint64_t epoch() const { return epoch_; }
  Membership membership() const;
  uint64_t dropped() const { return dropped_; }
  size_t store_keys() const { return store_.size(); }
  size_t pending() const { return pending_.size(); }

 private:
  struct Island {
    uint64_t session = 0;
    std::string routing_id;
    std::string endpoint;
    std::string public_key;
    Clock::time_point last_seen{};
    std::optional<Clock::time_point> suspect_deadline;  // dead if silent until then
    std::deque<uint64_t> applied_order;  // request ids of PUSHes applied (bounded), oldest first
    std::set<uint64_t> applied;          // the same ids, for lookup: a resent PUSH is not re-applied
  };
  struct Pending {
    int island = -1;
    uint64_t session = 0;
    uint64_t request_id = 0;
    proto::MsgType type = proto::MsgType::kPull;  // kPull or kStoreGet
    uint64_t tag = 0;                             // PULL
    std::string key;                              // STORE_GET
    std::optional<Clock::time_point> deadline;
    // What ERROR timeout says when no answer came.
    std::string what() const {
      return type == proto::MsgType::kPull ? "no server answer for tag " + std::to_string(tag)
                                           : "store key '" + key + "' not set";
    }
  };

  void on_join(const std::string& routing_id, const std::string& user_id, const proto::Message& m,
               Clock::time_point now, std::vector<Outgoing>* out);
  void on_push(int id, Island& isl, const proto::Message& m, std::vector<Outgoing>* out);
  // PUSH under a star tag (transport/star.h): the star all-reduce, never the server role.
  void on_star_push(int id, Island& isl, const proto::Message& m, std::vector<Outgoing>* out);
  // Remembers a PUSH's request id as applied (a resent PUSH is acknowledged, not applied again).
  void applied(Island& isl, uint64_t rid);
  void on_pull(int id, Island& isl, const proto::Message& m, Clock::time_point now, std::vector<Outgoing>* out);
  void on_store_set(int id, Island& isl, const proto::Message& m, std::vector<Outgoing>* out);
  // Stores (key, bytes) and answers the STORE_GETs waiting for it; false (nothing changed)
  // when the store would exceed max_store_bytes.
  bool store_put(const std::string& key, std::span<const uint8_t> bytes, std::vector<Outgoing>* out);
  void on_store_get(int id, Island& isl, const proto::Message& m, Clock::time_point now, std::vector<Outgoing>* out);
  void on_suspect(int id, const proto::Message& m, Clock::time_point now);

  // Bumps the epoch, sends MEMBERSHIP to every live island but `skip`, records the change.
  void membership_changed(const std::vector<MemberChange>& changes, int skip, std::vector<Outgoing>* out);
  void remove_island(int id);
  // Answers every waiting PULL the server (or the star all-reduce) can answer now;
  // `star_only`: only those under star tags (the server role is not asked).
  void answer_pulls(std::vector<Outgoing>* out, bool star_only = false);
  // The server's answer to (island, tag) as a PULL_REPLY, or nullopt; ERROR when it throws.
  std::optional<std::vector<uint8_t>> try_pull(int id, const Island& isl, uint64_t tag, uint64_t rid);
  // Queues `p` (from `isl`) to wait wait_ms for its answer; a resent request waits once.
  // Answered at once with ERROR: timeout when wait_ms is 0, limit when max_pending wait.
  void wait_or_fail(const Island& isl, Pending p, uint32_t wait_ms, Clock::time_point now,
                    std::vector<Outgoing>* out);
  // Sends, in queue order, what `answer` returns for each waiting request and drops those it
  // answered (nullopt: still waiting). A waiting request's island is live with its session
  // (wait_or_fail queues only those; remove_island() drops an island's requests, and a new
  // session replaces an old one only through it): one that is not is dropped unanswered.
  using Answer = std::function<std::optional<std::vector<uint8_t>>(const Pending&, const Island&)>;
  void answer_pending(std::vector<Outgoing>* out, const Answer& answer);
  // The server role's clock (OuterServer::on_time): seconds since this state was made. A
  // deadline it acted on may answer waiting PULLs (into `out`).
  void server_time(Clock::time_point now, std::vector<Outgoing>* out);

  // Message builders; the header is addressed to (island, session) with the current epoch.
  std::vector<uint8_t> reply(proto::MsgType type, int id, uint64_t session, uint64_t rid,
                             proto::Message body = {}) const;
  std::vector<uint8_t> error(int id, uint64_t session, uint64_t rid, proto::ErrorCode code,
                             const std::string& text) const;

  const CoordinatorOptions& options_;
  uint64_t epoch_ = 0;
  std::map<int, Island> islands_;
  std::string ended_;  // why the run was ended (end_run); "" while it goes on
  bool all_present_logged_ = false;
  std::map<std::string, std::vector<uint8_t>> store_;
  size_t store_bytes_ = 0;
  std::vector<Pending> pending_;
  StarReducer star_;  // the star all-reduce (transport.collective: star)
  // Applied PUSH ids of removed islands by (id, session): a session that re-JOINs after being
  // declared dead and resends a PUSH that was applied must not apply it twice. Bounded.
  std::map<std::pair<int, uint64_t>, std::deque<uint64_t>> retired_;
  std::deque<std::pair<int, uint64_t>> retired_order_;
  // Records written per (island, session), by RECORD request id: all up to floor, and the
  // ids above it (a record resent after a reconnection or a coordinator restart is written once).
  struct RecordMarks {
    uint64_t floor = 0;
    std::set<uint64_t> above;
  };
  // True when the record (island, session, id) is new (and marks it written); id 0: always.
  bool new_record(int id, uint64_t session, uint64_t rid);
  // Whether `key` is left out of the saved state (CoordinatorOptions::transient_prefixes).
  bool transient(const std::string& key) const;
  std::map<std::pair<int, uint64_t>, RecordMarks> records_;
  bool dirty_ = false;
  bool urgent_ = false;
  uint64_t dropped_ = 0;
  LogLimiter limiter_;
  Clock::time_point started_ = Clock::now();  // the origin of the server role's clock
};

}  // namespace atl::transport
