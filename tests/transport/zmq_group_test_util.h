// Helpers for the data-plane tests (zmq_group_test, gloo_group_test, zmq_star_test): free
// loopback ports, a control plane whose membership a test can change, W islands as threads,
// the in-process reference, and checks that every Group implementation must pass.
#pragma once

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "compression/pipeline.h"
#include "transport/control_plane.h"
#include "transport/inproc/inproc_group.h"
#include "tests/transport/static_control_plane.h"
#include "transport/zmq/zmq_group.h"

namespace atl::transport::testing {

// A one-stage pipeline (block 64, stochastic rounding, zstd level 1 where it applies).
inline compression::Pipeline make_pipeline(compression::StageId id) {
  compression::StageConfig s;
  s.id = id;
  s.block = 64;
  s.rounding = compression::Rounding::kStochastic;
  s.level = 1;
  return compression::Pipeline::make({s}).value();
}

// Runs body(i) on one thread per island and joins them; rethrows the first exception.
inline void run_islands(int w, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(w));
  for (int i = 0; i < w; ++i) {
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// `n` distinct loopback ports that were free a moment ago (all held open while choosing).
inline std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("free_ports: cannot bind");
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

inline std::vector<Peer> loopback_peers(int w) {
  std::vector<Peer> peers;
  std::vector<int> ports = free_ports(w);
  for (int i = 0; i < w; ++i) peers.push_back({i, "tcp://127.0.0.1:" + std::to_string(ports[i]), ""});
  return peers;
}

// A key-value store that TestPlanes share (the rendezvous store of the GlooGroup tests).
struct TestStore {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<uint8_t>> values;
};

// A ControlPlane whose membership the test sets (per island, so views can differ). Without
// a TestStore, the store calls fail with kUnavailable.
class TestPlane final : public ControlPlane {
 public:
  TestPlane(int self, Membership m, std::shared_ptr<TestStore> store = nullptr)
      : self_(self), m_(std::move(m)), store_(std::move(store)) {}
  void set(Membership m) {
    std::lock_guard<std::mutex> lock(mu_);
    m_ = std::move(m);
    cv_.notify_all();
  }
  int suspects() const {
    std::lock_guard<std::mutex> lock(mu_);
    return suspects_;
  }
  int self() const override { return self_; }
  Membership membership() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return m_;
  }
  Membership wait_for_change(uint64_t epoch, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto changed = [&] { return m_.epoch != epoch; };
    if (deadline) cv_.wait_until(lock, *deadline, changed);
    else cv_.wait(lock, changed);
    return m_;
  }
  void suspect(int) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++suspects_;
  }
  Status push(uint64_t, std::vector<uint8_t>, double) override { return Status(StatusCode::kUnavailable, "no server"); }
  StatusOr<std::vector<uint8_t>> pull(uint64_t, Deadline) override { return Status(StatusCode::kUnavailable, "no server"); }
  Status store_set(const std::string& key, std::vector<uint8_t> value) override {
    if (!store_) return Status(StatusCode::kUnavailable, "no store");
    std::lock_guard<std::mutex> lock(store_->mu);
    store_->values[key] = std::move(value);
    store_->cv.notify_all();
    return Status::ok();
  }
  StatusOr<std::vector<uint8_t>> store_get(const std::string& key, Deadline deadline) override {
    if (!store_) return Status(StatusCode::kUnavailable, "no store");
    std::unique_lock<std::mutex> lock(store_->mu);
    auto present = [&] { return store_->values.count(key) > 0; };
    if (deadline) {
      if (!store_->cv.wait_until(lock, *deadline, present)) return Status(StatusCode::kTimeout, "not set: " + key);
    } else {
      store_->cv.wait(lock, present);
    }
    return store_->values.at(key);
  }
  void record(const std::string&) override {}

 private:
  int self_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Membership m_;
  int suspects_ = 0;
  std::shared_ptr<TestStore> store_;
};

// W islands on loopback, each a ZmqGroup over its own control plane.
struct ZmqCluster {
  // static_planes: StaticControlPlane (fixed membership); else TestPlane (changeable).
  explicit ZmqCluster(int w, ZmqGroupOptions options = {}, bool static_planes = true,
                      OuterServer* server = nullptr) {
    peers = loopback_peers(w);
    if (static_planes) {
      StaticClusterOptions so;
      so.peers = peers;
      so.server = server;
      cluster = std::make_unique<StaticCluster>(so);
      for (int i = 0; i < w; ++i) planes.push_back(cluster->plane(i));
    } else {
      for (int i = 0; i < w; ++i) {
        auto p = std::make_unique<TestPlane>(i, Membership{0, peers});
        test_planes.push_back(p.get());
        planes.push_back(std::move(p));
      }
    }
    for (int i = 0; i < w; ++i) groups.push_back(std::make_unique<ZmqGroup>(*planes[i], options));
  }
  int size() const { return static_cast<int>(groups.size()); }
  // Runs body(i) on one thread per island and joins them; rethrows the first exception.
  void run(const std::function<void(int)>& body) { run_islands(size(), body); }
  std::vector<Peer> peers;
  std::unique_ptr<StaticCluster> cluster;
  std::vector<std::unique_ptr<ControlPlane>> planes;
  std::vector<TestPlane*> test_planes;
  std::vector<std::unique_ptr<ZmqGroup>> groups;  // destroyed first (declared last)
};

// The in-process reference: each island i calls allreduce_mean(buffers[i], codec,
// weights[i], transmitted[i]) as the group's collective number `seq` (after `seq` one-element
// ones: lossy seeds depend on it); fills the tensors in place. `star`: InprocHub::set_star.
inline void inproc_allreduce(std::vector<at::Tensor>& buffers, const compression::Pipeline& codec,
                             const std::vector<double>& weights, std::vector<at::Tensor>* transmitted = nullptr,
                             uint64_t seq = 0, bool star = false) {
  const int w = static_cast<int>(buffers.size());
  Scheduler scheduler(w);
  InprocHub hub(w, scheduler);
  hub.set_star(star);
  std::vector<std::unique_ptr<Group>> groups;
  for (int i = 0; i < w; ++i) groups.push_back(hub.make_group(i));
  scheduler.run([&](int i) {
    for (uint64_t k = 0; k < seq; ++k) groups[i]->allreduce_mean(at::zeros({1}), codec, 1.0)->wait();
    at::Tensor t = transmitted ? (*transmitted)[i] : at::Tensor();
    groups[i]->allreduce_mean(buffers[i], codec, weights[i], t)->wait();
  });
}

// W random [n] inputs from `seed`; deep copies; ids 0..W-1.
inline std::vector<at::Tensor> random_inputs(int w, int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> v;
  for (int i = 0; i < w; ++i) v.push_back(at::randn({n}));
  return v;
}

inline std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.clone());
  return out;
}

inline std::vector<int> iota_ids(int w) {
  std::vector<int> ids(w);
  for (int i = 0; i < w; ++i) ids[i] = i;
  return ids;
}

inline Deadline in_seconds(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Each island of `c` (3 islands) issues five collectives before waiting for any (island 2 a
// while later, so the others' messages wait for it), mixing codecs and a broadcast, and waits
// in reverse order: every result is bitwise the in-process one.
template <typename Cluster>
void expect_several_collectives_in_flight_match_inproc(Cluster& c) {
  const int w = c.size();
  const compression::Pipeline fp32, int8 = make_pipeline(compression::StageId::kInt8);
  const std::vector<const compression::Pipeline*> codecs = {&fp32, &int8, &fp32, &int8, &fp32};
  std::vector<std::vector<at::Tensor>> inputs;  // [collective][island]
  for (size_t k = 0; k < codecs.size(); ++k) inputs.push_back(random_inputs(w, 5000 + 17 * k, k));
  auto issue = [&](Group& g, int i, std::vector<std::vector<at::Tensor>>& bufs) {
    std::vector<std::unique_ptr<Handle>> handles;
    for (size_t k = 0; k < codecs.size(); ++k) {
      if (k == 2) handles.push_back(g.broadcast(1, bufs[k][i], *codecs[k]));
      else handles.push_back(g.allreduce_mean(bufs[k][i], *codecs[k], 1.0 + i));
    }
    std::vector<CollectiveResult> r(handles.size());
    for (size_t k = handles.size(); k-- > 0;) r[k] = handles[k]->wait(in_seconds(30));
    return r;
  };
  std::vector<std::vector<at::Tensor>> ref, got;
  for (auto& v : inputs) {
    ref.push_back(clones(v));
    got.push_back(clones(v));
  }
  {
    Scheduler scheduler(w);
    InprocHub hub(w, scheduler);
    std::vector<std::unique_ptr<Group>> groups;
    for (int i = 0; i < w; ++i) groups.push_back(hub.make_group(i));
    scheduler.run([&](int i) { issue(*groups[i], i, ref); });
  }
  c.run([&](int i) {
    if (i == 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (const CollectiveResult& r : issue(*c.groups[i], i, got)) EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  });
  for (size_t k = 0; k < codecs.size(); ++k) {
    for (int i = 0; i < w; ++i) EXPECT_TRUE(at::equal(got[k][i], ref[k][i])) << "collective " << k << " island " << i;
  }
}

}  // namespace atl::transport::testing
