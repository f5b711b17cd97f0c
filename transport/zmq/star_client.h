// The island's side of the star all-reduce (transport/star.h) in real runs: ZmqGroup's
// allreduce_mean when ZmqGroupOptions::star is set (`transport.collective: star`). The
// coordinator's StarReducer (star_reducer.h) does the arithmetic; this class only moves
// frames through the ControlPlane's push/pull, in star::kTagBit's tag namespace.
//
// One worker thread runs the collectives in issue order. For collective `seq`:
//   1. encode the buffer once (star::contribution_seed; `transmitted` <- its decoding) and
//      PUSH it with the weight (blocks until the coordinator acknowledges it);
//   2. PULL star::tag(seq, kInfo) in slices of kWaitSlice until the collective is complete
//      (the RESULT_INFO body: status, contributors, weight sum);
//   3. with two or more contributors, PULL star::tag(seq, kData) (RESULT_INFO body, then the
//      mean's frame) with a deadline from its size and the assumed bandwidth (doubled after
//      each expiry; the coordinator keeps the result until it is fetched) and decode the mean
//      into the buffer. Alone (or outside the collective: kMembershipChanged) the buffer keeps
//      its own values, as in the ring.
// So the next collective's PUSH leaves once this one is complete here; the island thread is
// never blocked by it.
//
// Thread-safety: allreduce_mean is called by the island thread (in sequence order); bytes()
// from any thread. The destructor stops the worker after the current step and joins it;
// collectives not finished then complete with kUnavailable. `control` must outlive it.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "compression/pipeline.h"
#include "transport/completion.h"
#include "transport/control_plane.h"
#include "transport/group.h"
#include "transport/zmq/zmq_group.h"

namespace atl::transport {

class StarClient {
 public:
  static constexpr std::chrono::milliseconds kWaitSlice{1000};  // one completion PULL's wait

  // Announces options.first_seq when it is above 0: a joiner sits out earlier collectives
  // (blocks until the coordinator answers; a failure is logged: the coordinator then waits
  // for this island in earlier collectives until it leaves). Starts the worker. The fetch
  // timeout is slack * (latency + bytes / bandwidth) + 1 s (timeout_slack, latency_ms,
  // bandwidth_mbps).
  StarClient(ControlPlane& control, const ZmqGroupOptions& options);
  ~StarClient();
  StarClient(const StarClient&) = delete;
  StarClient& operator=(const StarClient&) = delete;

  // Group::allreduce_mean as collective `seq` (arguments checked by the caller). Returns at
  // once; the buffer must stay untouched until the handle is done.
  std::unique_ptr<Handle> allreduce_mean(uint64_t seq, at::Tensor buffer, const compression::Pipeline& codec,
                                         double weight, at::Tensor transmitted);
  // Frames pushed and results pulled (their bytes, as ServerLink counts push/pull).
  ByteCounters bytes() const;

 private:
  struct Op {
    uint64_t seq = 0;
    at::Tensor buffer, transmitted;
    compression::Pipeline codec;
    double weight = 1;
    std::shared_ptr<Completion> done;
  };

  void run();
  CollectiveResult execute(Op& op);
  bool stopping() const;

  ControlPlane& control_;
  const ZmqGroupOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::atomic<uint64_t> sent_{0}, received_{0}, raw_{0};
  std::thread worker_;
};

}  // namespace atl::transport
