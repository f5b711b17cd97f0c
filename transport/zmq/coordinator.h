// The coordinator of a real run: membership (join, heartbeat, leave, failure detection),
// the rendezvous key-value store, the host of the server role (OuterServer) and the sink of
// the islands' metrics records. Islands talk to it through ZmqControlClient; the protocol is
// transport/zmq/protocol.h and docs/protocol.md.
//
// One ROUTER socket bound at options.endpoint. Membership changes (join, rejoin of an id by
// a new process, LEAVE, failure) bump the epoch by one and are pushed to every live island
// as MEMBERSHIP. An island is declared dead after heartbeat_timeout_ms of silence, or
// suspect_heartbeats heartbeat periods after another island reported it (SUSPECT) if it
// stays silent meanwhile. Every malformed or hostile message is logged (rate-limited: at
// most a few lines per second, then a count) and dropped; nothing a peer sends can stop the
// coordinator.
//
// Threads: start() binds the sockets on the caller's thread, then runs the loop on a thread
// the Coordinator owns; stop() (or the destructor) ends and joins it. The public methods are
// thread-safe. options.server and options.record_sink are called on the loop thread only,
// one call at a time, so they need no locking of their own against the coordinator.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compression/pipeline.h"
#include "src/base/status.h"
#include "transport/control_plane.h"
#include "transport/outer_server.h"

namespace atl::transport {

// What a coordinator restarted mid-run picks the run up from (docs/protocol.md "Coordinator
// restart"): the membership with each island's session, endpoint and key, the epoch, the
// rendezvous store, and which records of each island session were written (RECORD's request
// id numbers them: every one up to `floor`, and those in `above`).
struct CoordinatorSnapshot {
  struct Member {
    int id = -1;
    uint64_t session = 0;
    std::string endpoint;
    std::string public_key;
  };
  struct Records {
    int island = -1;
    uint64_t session = 0;
    uint64_t floor = 0;
    std::vector<uint64_t> above;  // ascending, each > floor
  };
  // PUSH request ids the server role applied, per member session, oldest first: a PUSH
  // resent to a restarted coordinator is acknowledged, not applied again.
  struct Applied {
    int island = -1;
    uint64_t session = 0;
    std::vector<uint64_t> ids;
  };
  uint64_t epoch = 0;
  std::vector<Member> members;  // ascending id
  std::map<std::string, std::vector<uint8_t>> store;
  std::vector<Records> records;
  std::vector<Applied> applied;
  double server_clock_s = 0;  // the server role's clock at the save (it goes on from there)
};

struct CoordinatorOptions {
  // ROUTER bind address. Port "*" ("tcp://127.0.0.1:*") picks a free port; endpoint()
  // returns the bound address.
  std::string endpoint = "tcp://127.0.0.1:29500";
  // > 0: island ids must lie in [0, expected_islands) (others are refused) and the
  // coordinator logs when all of them are present. 0: any id, no such log.
  int expected_islands = 0;
  // Which run this coordinator holds: an island whose JOIN names another one is refused
  // (ERROR rejected, naming the first line where the two texts differ). Opaque here; the
  // processes of a real run send run::run_identity of their config (src/run/run_identity.h).
  std::string run;
  // The islands' heartbeat period; only used to time suspicions (below).
  int64_t heartbeat_ms = 500;
  // Silence after which an island is declared dead.
  int64_t heartbeat_timeout_ms = 5000;
  // A SUSPECTed island that stays silent for this many heartbeat periods is declared dead
  // before heartbeat_timeout_ms.
  int suspect_heartbeats = 3;

  // CurveZMQ: encrypt and authenticate. The ROUTER is a CURVE server with this secret key,
  // and only clients whose public key is allowed (allowed_keys, plus keys_dir/allowed/*.pub
  // re-read on each handshake when keys_dir is set) may connect.
  bool curve = false;
  std::string curve_secret_key;           // Z85 (curve::load_keypair(keys_dir, "coordinator"))
  std::vector<std::string> allowed_keys;  // Z85 public keys of islands
  std::string keys_dir;                   // "" = allowed_keys only

  // The server role for star / parameter-server algorithms; not owned, must outlive the
  // coordinator. nullptr: PUSH and PULL are answered with ERROR no_server.
  OuterServer* server = nullptr;
  // Decodes PUSH frames and encodes PULL_REPLY frames; the islands must use the same one.
  compression::Pipeline pipeline;
  // One call per RECORD (a JSON object, no line break): the process appends it to
  // metrics.jsonl. nullptr: records are dropped.
  std::function<void(const std::string& json)> record_sink;
  // One call per membership change, after the epoch bump: the new view and the islands whose
  // change it is (several when the failure detector declares several dead at once). The
  // coordinator process writes `membership` records from it (src/run/coordinator_process.cpp);
  // the transport builds no records itself. nullptr: not reported (the change is still logged).
  std::function<void(const Membership& view, const std::vector<MemberChange>& changes)> on_membership;

  // One call per STORE_SET an island made (after it was stored, on the loop thread): the
  // island and the key. The coordinator process follows the checkpoint protocol's marks with
  // it (docs/protocol.md "Checkpoints"). nullptr: not reported.
  std::function<void(int island, const std::string& key, std::span<const uint8_t> value)> on_store_set;
  // The first epoch (a run resumed from a checkpoint continues past the epochs it had).
  uint64_t initial_epoch = 0;
  // A coordinator restarted mid-run starts from this state (its epoch replaces
  // initial_epoch); every member gets heartbeat_timeout_ms + 3 s from the start to be heard
  // from (an island's libzmq redials at most every 2 s).
  std::optional<CoordinatorSnapshot> restore;
  // Called on the loop thread with the state after it changed: before the replies leave
  // when a store key was set, the membership changed, or the server role applied a PUSH or
  // closed a round at its deadline (the process then saves the server role's state too);
  // after records were written, at most once every persist_ms. The process saves it together
  // with its metrics.jsonl length, so that a restarted coordinator continues from there.
  // nullptr: not called.
  std::function<void(const CoordinatorSnapshot&)> persist;
  int64_t persist_ms = 500;
  // Store keys with one of these prefixes are left out of the saved state and do not make a
  // save urgent (large transient values, such as state hand-over parts).
  std::vector<std::string> transient_prefixes;

  // Limits against hostile or broken peers.
  int64_t max_message_bytes = int64_t{1} << 30;  // larger messages drop the connection
  int64_t max_push_elements = int64_t{1} << 28;  // largest tensor a PUSH frame may declare
  int64_t max_store_bytes = int64_t{256} << 20;  // total bytes of store keys and values
  int max_pending = 4096;                        // PULL + STORE_GET requests waiting
};

struct CoordinatorStats {
  uint64_t dropped = 0;           // malformed, hostile or unexpected messages dropped
  uint64_t handshakes_refused = 0;  // CURVE keys refused by the allow-list, and failed
                                    // handshakes (no CURVE, wrong coordinator key, not ZMTP)
  size_t store_keys = 0;
};

class CoordinatorState;

class Coordinator {
 public:
  // Validates the options, binds and starts the loop. kInvalidArgument for bad options (bad
  // curve key, negative timeouts), kUnavailable when the endpoint cannot be bound or CURVE
  // is missing from libzmq.
  static StatusOr<std::unique_ptr<Coordinator>> start(CoordinatorOptions options);
  ~Coordinator();  // stop()
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Ends the loop and joins its thread. Idempotent. Pending requests are not answered.
  void stop();

  // The bound endpoint, e.g. "tcp://127.0.0.1:41234" (what islands connect to).
  const std::string& endpoint() const { return endpoint_; }
  // Z85 public key of the coordinator ("" without curve): what islands authenticate.
  const std::string& public_key() const { return public_key_; }

  Membership membership() const;
  // Blocks until the epoch differs from `epoch` or the deadline passes; the latest view.
  Membership wait_for_change(uint64_t epoch, Deadline deadline) const;
  CoordinatorStats stats() const;
  // Sets `key` in the rendezvous store on the coordinator's own behalf, as an island's
  // STORE_SET would (waiting STORE_GETs are answered): the process announces decisions such
  // as the start of a run (src/run/coordinator_process.cpp). Applied by the loop thread
  // within one tick; not applied after stop().
  void store_set(const std::string& key, std::vector<uint8_t> value);
  // Ends the run for its islands: every live island, and every one that joins or heartbeats
  // after, is told (ERROR run_ended with `why`; its client then fails every call with it) and
  // leaves. For a run the coordinator process stops (a stop policy failed). Applied by the
  // loop thread within one tick; not after stop().
  void end_run(const std::string& why);
  // The CURVE public keys (Z85) the allow-list has refused so far (the first 1024), sorted.
  std::vector<std::string> refused_keys() const;

 private:
  explicit Coordinator(CoordinatorOptions options);
  Status bind();
  void loop();

  struct Sockets;  // the ZeroMQ context and sockets; used by the loop thread only
  const CoordinatorOptions options_;
  std::unique_ptr<Sockets> sockets_;
  std::unique_ptr<CoordinatorState> state_;  // loop thread only
  std::string endpoint_;
  std::string public_key_;

  mutable std::mutex mu_;  // guards the snapshot below
  mutable std::condition_variable changed_;
  Membership membership_;  // set at construction, then written by the loop thread only (which may read it without mu_)
  CoordinatorStats stats_;
  std::vector<std::string> refused_keys_;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> store_sets_;  // for the loop
  std::optional<std::string> end_run_;                                     // for the loop
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace atl::transport
