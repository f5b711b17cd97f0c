// In-process transport: all islands of a simulation live in one process and exchange
// encoded bytes through shared memory. It is a product feature (the simulator's network),
// not a test double: payloads go through the same codecs, collectives run the same
// schedules as the networked transports (transport/collectives/schedules.h: the hub, which
// sees every member, runs one program per member round by round over InprocWire), and the
// bytes each island sends and receives are counted from the encoded messages themselves.
//
// Blocking waits go through the cooperative Scheduler, so exactly one island runs at a time
// and results are deterministic.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "transport/group.h"
#include "transport/inproc/scheduler.h"
#include "transport/network_model.h"
#include "transport/outer_server.h"

namespace atl::transport {

// Shared state of one simulated network. Owned by the simulator; outlives its groups.
// Accessed only by the participant holding the scheduler's turn.
class InprocHub {
 public:
  InprocHub(int islands, Scheduler& scheduler);
  ~InprocHub();

  // The Group of island `id`. One per island. Its subgroup(key, ids) are groups of the same
  // hub whose collectives involve only `ids` (matched by key and their own sequence numbers).
  std::unique_ptr<Group> make_group(int id);
  // Hosts the server role; `server` must outlive the hub's use. May be null.
  void set_server(OuterServer* server) { server_ = server; }

  int size() const { return static_cast<int>(st_.counters.size()); }

  // Virtual clock: with a network model, every collective, push and pull costs virtual time
  // on the scheduler's clock (island ids = scheduler participants): a collective starts when
  // its last member posts, runs its real message pattern as phases (the messages the
  // members' programs send in one round: ring, 2(W-1) steps of one chunk per member; lossy,
  // reduce-scatter then all-gather; broadcast and allgather, one), each phase costing
  // NetworkModel::phase_time; a member that waits for it is
  // advanced to its completion. `detect_s`: how long survivors take to notice a lost member.
  // Without a model (the default) communication is instantaneous.
  void set_network(const NetworkModel* network, uint64_t seed, double detect_s);
  // all-reduce through the server endpoint (transport.collective: star, transport/star.h):
  // instead of the ring / direct schemes, every member sends its encoded buffer to kServer,
  // which reduces in member-id order and sends the mean, encoded once, back to every member.
  // On the virtual clock: two phases through the server's link (members -> server, then
  // server -> members). Broadcasts are unchanged.
  void set_star(bool star) { star_ = star; }
  // Islands whose ranks each have a link of their own (network.rank_links): the shards of a
  // sharded exchange (transport/shards.h) are timed each on its own link instead of as
  // sharing the island's.
  void set_rank_links(bool own) { rank_links_ = own; }

  // Island `id` left the run at virtual time `at`: it is no longer a member and its
  // contributions to unfinished collectives are dropped. `failure`: it died without a word,
  // so every collective that starts before the survivors notice (at + detect_s) completes
  // only then; otherwise (an island not yet added) nobody waits for it.
  void remove_member(int id, double at, bool failure = true);

  // Island `id` joins (again): it takes part in collectives from sequence number `first_seq`
  // on (those of the live members' with smaller numbers complete without it). Its Group
  // must be made after this call. The state it needs travels with hand_over().
  void add_member(int id, uint64_t first_seq);
  // The sequence number of the next collective island `id` will issue (in the group of
  // every island; a joiner takes part in each sub-group from that sub-group's next one).
  uint64_t next_seq(int id) const { return st_.next_seq[static_cast<size_t>(id)]; }
  // Counts `bytes` sent from `from` to `to` starting at virtual time `at`; returns the
  // arrival time on the network model.
  double hand_over(int from, int to, uint64_t bytes, double at);

  // Time island `id` spent blocked in waits, split into waiting for the others to post
  // (idle) and for the data to move (comm).
  struct WaitTime {
    double comm_s = 0;
    double idle_s = 0;
  };
  WaitTime wait_time(int id) const { return st_.waits[static_cast<size_t>(id)]; }

  // A collective every member had posted, complete (its results are in the members'
  // buffers) but not yet collected by some of them: an exchange in flight across a
  // checkpoint's step boundary (diloco with algorithm.overlap).
  struct Settled {
    uint32_t key = 0;             // its group (0: every island; else a sub-group's key)
    uint64_t seq = 0;
    uint8_t kind = 0;             // 0 all-reduce, 1 broadcast, 2 all-gather
    int root = -1;
    std::vector<int> ids;         // sub-group: its islands (empty = every island)
    CollectiveResult result;
    double start = 0, done_at = 0;
    std::vector<std::pair<int, double>> holders;  // (island, virtual time it posted), ascending
  };
  // The hub's checkpointed state (a Snapshot adds the network RNG and the collectives in flight).
  struct State {
    std::vector<int> members;             // ascending
    uint64_t epoch = 0;                   // bumped by every membership change
    std::vector<ByteCounters> counters;   // per island
    std::vector<WaitTime> waits;          // per island
    std::vector<uint64_t> first_seq;      // per island: first collective it takes part in
    std::vector<uint64_t> next_seq;       // per island: its next collective
    // Sub-groups (key != 0): per (key, island), the next collective and the first one it
    // takes part in (a joiner: the sub-group's next collective when it joined).
    std::map<std::pair<uint32_t, int>, uint64_t> sub_next_seq, sub_first_seq;
    std::vector<int> joiners;             // islands added by add_member()
    double detected_at = 0;               // when survivors have noticed the latest failure
    double last_push_arrival = 0;         // virtual time the latest push reached the server
  };
  // The hub's state between collectives, for the simulator's checkpoints (src/core): taken
  // while every collective in flight is complete (settled()), restored into a hub built the
  // same way (same islands, network, seed) before any group is made; each restored Settled
  // goes back to its holders through Group::resume_in_flight().
  struct Snapshot : State {
    std::string rng;  // the network RNG, as std::mt19937_64's operator<< writes it
    std::vector<Settled> settled;  // ascending (key, seq)
  };
  // The most bytes of messages the hub held at once while it ran a collective's programs
  // (sent and not yet consumed by their receiver): about one round of the schedule, since a
  // consumed message is freed when its program next suspends (docs/simulator.md "Memory").
  uint64_t peak_message_bytes() const { return peak_message_bytes_; }
  bool quiescent() const { return collectives_.empty(); }
  // Virtual time the latest push reached the server role (0: none yet).
  double last_push_arrival() const { return st_.last_push_arrival; }
  bool settled() const;  // every collective in flight is complete
  Snapshot snapshot() const;
  void restore(const Snapshot& s);

 private:
  friend class InprocGroup;
  friend class InprocHandle;
  friend class InprocWire;

  enum class Kind : uint8_t { kAllreduce, kBroadcast, kAllgather };
  struct Contribution {
    at::Tensor buffer;
    const compression::Pipeline* codec = nullptr;
    double weight = 1;
    at::Tensor transmitted;  // optional: what the others decoded of this contribution
    std::vector<uint8_t> bytes;                       // allgather: this member's bytes
    std::vector<std::vector<uint8_t>>* gathered = nullptr;  // allgather: where everyone's go
  };
  // A collective is named by its group (0 = every island; else a sub-group's key) and its
  // sequence number in that group.
  using CollectiveId = std::pair<uint32_t, uint64_t>;
  struct Collective {
    Kind kind = Kind::kAllreduce;
    int root = -1;
    std::vector<int> ids;                       // sub-group: its islands (empty = every island)
    std::map<int, Contribution> contributions;  // by island id (ascending = ring order)
    bool done = false;
    CollectiveResult result;
    int waiting = 0;                            // handles that have not collected the result
    std::map<int, double> holders;              // their islands -> virtual time they posted
    double start = 0;                           // virtual time the last member posted
    double done_at = 0;                         // virtual time the result is everywhere
    // One of this many concurrent shards of one exchange (transport/shards.h): its messages
    // are timed as sharing their links with the others'.
    int streams = 1;
  };

  // Called by the last arriving member: runs the collective on every member's buffer.
  void run_allreduce(Collective& c, uint64_t seq);
  // Runs one program per member (transport/collectives/schedules.h) round by round: the
  // messages sent in a round are one network phase, delivered at its end. `clock` starts at
  // the collective's start and ends at its completion.
  template <typename MakeProgram>
  void run_programs(const std::vector<int>& ids, const MakeProgram& make, double& clock);
  void run_star(std::vector<Contribution*>& parts, std::vector<int>& ids, uint64_t seq, double& clock);
  // A broadcast or an allgather: one program per member (run_programs).
  void run_exchange(Collective& c);
  // Counts a message of `size` bytes (standing for `raw_bytes` of fp32) from `from` to `to`
  // (-1: the server role) and, with a network model, adds it to the current phase.
  void count(int from, int to, uint64_t size, uint64_t raw_bytes);
  int phase_streams_ = 1;  // the completing collective's Collective::streams
  // Moves `src` to `dst` through `codec`, counting bytes on both ends.
  void transfer(int from, int to, const at::Tensor& src, at::Tensor dst,
                const compression::Pipeline& codec, uint64_t seed = 0);
  // The same for a frame already encoded (`raw_numel`: the fp32 values it stands for).
  void deliver(int from, int to, const std::vector<uint8_t>& frame, int64_t raw_numel, at::Tensor dst,
               const compression::Pipeline& codec);
  // Closes the current phase: `clock` moves past it (after any cut between its endpoints).
  void end_phase(double& clock);
  void complete(Collective& c, uint64_t seq);
  // Blocked island `self` resumes at `ready_at`: accounts the wait and advances its clock.
  void resume(int self, double posted, double start, double ready_at);
  // Sequence numbers of group `key` (0: every island; see InprocGroup).
  uint64_t& next_seq_of(uint32_t key, int id);
  uint64_t first_seq_of(uint32_t key, int id) const;

  Scheduler& scheduler_;
  OuterServer* server_ = nullptr;
  State st_;
  std::map<CollectiveId, Collective> collectives_;
  uint64_t peak_message_bytes_ = 0;  // peak_message_bytes()
  std::vector<uint8_t> scratch_;
  const NetworkModel* network_ = nullptr;
  std::mt19937_64 rng_;
  double detect_s_ = 0;
  std::vector<Transfer> phase_;
  // Restored collectives not yet handed back: per island, (collective, time it posted).
  std::map<int, std::vector<std::pair<CollectiveId, double>>> restored_;
  bool star_ = false;                // all-reduce through the server (set_star)
  bool rank_links_ = false;          // shards on links of their own (set_rank_links)
  // Members that take part in collective `seq` of `c`'s group.
  size_t participants(const Collective& c, uint32_t key, uint64_t seq) const;
};

}  // namespace atl::transport
