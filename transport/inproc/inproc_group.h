// In-process transport: all islands of a simulation live in one process and exchange
// encoded bytes through shared memory. It is a product feature (the simulator's network),
// not a test double: payloads go through the same codecs, collectives run the same ring
// schedule as the networked transports (transport/ring.h), and the bytes each island sends
// and receives are counted from the encoded messages themselves.
//
// Blocking waits go through the cooperative Scheduler, so exactly one island runs at a time
// and results are deterministic.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "transport/group.h"
#include "transport/inproc/scheduler.h"
#include "transport/outer_server.h"

namespace atl::transport {

// Shared state of one simulated network. Owned by the simulator; outlives its groups.
// Accessed only by the participant holding the scheduler's turn.
class InprocHub {
 public:
  InprocHub(int islands, Scheduler& scheduler);
  ~InprocHub();

  // The Group of island `id`. One per island.
  std::unique_ptr<Group> make_group(int id);
  // Hosts the server role; `server` must outlive the hub's use. May be null.
  void set_server(OuterServer* server) { server_ = server; }

  int size() const { return static_cast<int>(counters_.size()); }

 private:
  friend class InprocGroup;
  friend class InprocHandle;

  enum class Kind : uint8_t { kAllreduce, kBroadcast };
  struct Contribution {
    at::Tensor buffer;
    const compression::Pipeline* codec = nullptr;
    double weight = 1;
    at::Tensor transmitted;  // optional: what the others decoded of this contribution
  };
  struct Collective {
    Kind kind = Kind::kAllreduce;
    int root = -1;
    std::map<int, Contribution> contributions;  // by island id (ascending = ring order)
    bool done = false;
    CollectiveResult result;
    int waiting = 0;                            // members that have not collected the result
  };

  // Called by the last arriving member: runs the collective on every member's buffer.
  void run_allreduce(Collective& c, uint64_t seq);
  void run_ring(std::vector<Contribution*>& parts, std::vector<int>& ids, double divisor);
  void run_direct(std::vector<Contribution*>& parts, std::vector<int>& ids, double divisor,
                  uint64_t seq);
  void run_broadcast(Collective& c);
  // Moves `src` to `dst` through `codec`, counting bytes on both ends.
  void transfer(int from, int to, const at::Tensor& src, at::Tensor dst,
                const compression::Pipeline& codec, uint64_t seed = 0);

  Scheduler& scheduler_;
  OuterServer* server_ = nullptr;
  std::vector<int> members_;
  uint64_t epoch_ = 0;
  std::vector<ByteCounters> counters_;
  std::map<uint64_t, Collective> collectives_;  // by sequence number
  std::vector<uint8_t> scratch_;
};

}  // namespace atl::transport
