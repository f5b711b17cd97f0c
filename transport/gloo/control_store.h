// Gloo's rendezvous store (gloo::rendezvous::Store) over the coordinator's key-value store
// (ControlPlane::store_set / store_get), for one mesh: every key is put under a prefix that
// names the membership epoch and the mesh generation ("gloo/e7/g0/"), so meshes of
// different epochs never read each other's addresses.
//
// Waiting. A key another member has not set yet is asked for again and again (store_get
// waiting up to `wait` each time, long enough for a round trip to the coordinator) for as
// long as the membership stays at `epoch` and `stop` is false: a member that
// is still computing before its next collective is waited for however long that takes, since
// the coordinator's heartbeats, not a timeout here, decide whether it is alive. When the epoch
// moves on (or `stop` is set) the wait throws RendezvousError, so a rendezvous among a stale
// member set never hangs. The timeout gloo passes to wait() is therefore not used.
//
// Thread model: used by the thread that builds the mesh (GlooGroup's worker) only.
#pragma once

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/control_plane.h"

namespace atl::transport::gloo_mesh {

// The rendezvous cannot complete: the epoch moved on, the group is stopping, or the control
// plane failed. The mesh build is abandoned (and retried for the new view).
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ControlStore final : public ::gloo::rendezvous::Store {
 public:
  ControlStore(ControlPlane& control, std::string prefix, uint64_t epoch, const std::atomic<bool>& stop,
               std::chrono::milliseconds wait);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for `key` (see the file comment), then returns its value.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  ControlPlane& control_;
  const std::string prefix_;
  const uint64_t epoch_;
  const std::atomic<bool>& stop_;
  const std::chrono::milliseconds wait_;
  std::map<std::string, std::vector<char>> fetched_;  // keys are set once: cache what was read
};

}  // namespace atl::transport::gloo_mesh
