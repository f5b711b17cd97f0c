// Helpers for the ZeroMQ control-plane tests: a coordinator and clients with short timeouts,
// membership waits, a mean-computing server role, a record sink, frames and temp dirs.
// (Reconstructed by the data-plane session after it overwrote this file by mistake; the
// helpers follow what the tests in this folder use.)
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compression/pipeline.h"
#include "transport/control_plane.h"
#include "transport/outer_server.h"
#include "tests/transport/static_control_plane.h"
#include "transport/zmq/control_client.h"
#include "transport/zmq/coordinator.h"

namespace atl::transport::testing {

using std::chrono::milliseconds;

inline Deadline in_ms(int64_t ms) { return Clock::now() + milliseconds(ms); }

inline int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

inline std::vector<int> ids(const Membership& m) {
  std::vector<int> out;
  for (const Peer& p : m.members) out.push_back(p.id);
  return out;
}

// Waits until the membership seen by `x` (a ControlPlane or the Coordinator) lists exactly
// `want`; returns the latest view either way.
template <typename T>
Membership wait_for_ids(T& x, const std::vector<int>& want, int64_t timeout_ms = 3000) {
  const Deadline deadline = in_ms(timeout_ms);
  Membership m = x.membership();
  while (ids(m) != want && Clock::now() < *deadline) m = x.wait_for_change(m.epoch, deadline);
  return m;
}

// A coordinator on a free loopback port with short heartbeats (100 ms, dead after 500 ms).
inline CoordinatorOptions fast_coordinator() {
  CoordinatorOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.heartbeat_ms = 100;
  o.heartbeat_timeout_ms = 500;
  return o;
}

// Starts a coordinator; nullptr (and a test failure) when it cannot.
inline std::unique_ptr<Coordinator> start_coordinator(CoordinatorOptions o = fast_coordinator()) {
  StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::start(std::move(o));
  if (!c.is_ok()) {
    ADD_FAILURE() << "coordinator did not start: " << c.status().to_string();
    return nullptr;
  }
  return std::move(*c);
}

// Client options matching fast_coordinator(); island K publishes tcp://127.0.0.1:(31000 + K).
inline ControlClientOptions fast_client(const std::string& coordinator, int island) {
  ControlClientOptions o;
  o.coordinator = coordinator;
  o.island = island;
  o.data_endpoint = "tcp://127.0.0.1:" + std::to_string(31000 + island);
  o.heartbeat_ms = 100;
  o.heartbeat_timeout_ms = 500;
  o.join_retry_ms = 100;
  o.request_timeout_ms = 5000;
  return o;
}

// Connects and joins; nullptr (and a test failure) when it cannot.
inline std::unique_ptr<ZmqControlClient> join(ControlClientOptions o, int64_t timeout_ms = 3000) {
  StatusOr<std::unique_ptr<ZmqControlClient>> c = ZmqControlClient::connect(std::move(o), in_ms(timeout_ms));
  if (!c.is_ok()) {
    ADD_FAILURE() << "join failed: " << c.status().to_string();
    return nullptr;
  }
  return std::move(*c);
}

// The server role: per tag, the weighted mean of the first `expected` pushes.
class MeanServer final : public OuterServer {
 public:
  explicit MeanServer(int expected) : expected_(expected) {}
  void on_push(int island, uint64_t tag, const at::Tensor& payload, double weight) override {
    std::lock_guard<std::mutex> lock(mu_);
    Tag& t = tags_[tag];
    at::Tensor w = payload.to(at::kDouble) * weight;
    t.sum = t.sum.defined() ? t.sum + w : w;
    t.weight += weight;
    ++t.count;
    pushers_.push_back(island);
  }
  std::optional<at::Tensor> on_pull(int, uint64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tags_.find(tag);
    if (it == tags_.end() || it->second.count < expected_) return std::nullopt;
    return (it->second.sum / it->second.weight).to(at::kFloat);
  }
  // Islands that pushed, in push order.
  std::vector<int> pushers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pushers_;
  }

 private:
  struct Tag {
    at::Tensor sum;
    double weight = 0;
    int count = 0;
  };
  const int expected_;
  mutable std::mutex mu_;
  std::map<uint64_t, Tag> tags_;
  std::vector<int> pushers_;
};

// Collects metrics records; thread-safe.
class RecordSink {
 public:
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
      cv_.notify_all();
    };
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  // True once a record containing `text` arrived (waits up to timeout_ms).
  bool wait_for(const std::string& text, int64_t timeout_ms = 3000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, *in_ms(timeout_ms), [&] {
      return std::any_of(lines_.begin(), lines_.end(),
                         [&](const std::string& l) { return l.find(text) != std::string::npos; });
    });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

// Collects the coordinator's membership changes (CoordinatorOptions::on_membership);
// thread-safe.
class MembershipLog {
 public:
  std::function<void(const Membership&, const std::vector<MemberChange>&)> callback() {
    return [this](const Membership& view, const std::vector<MemberChange>& changes) {
      std::lock_guard<std::mutex> lock(mu_);
      changes_.emplace_back(view, describe(changes));
      cv_.notify_all();
    };
  }
  // True once a change to exactly this epoch and these member ids arrived (waits up to
  // timeout_ms).
  bool wait_for(uint64_t epoch, const std::vector<int>& ids, int64_t timeout_ms = 3000) {
    return wait([&](const Membership& m, const std::string&) {
      std::vector<int> got;
      for (const Peer& p : m.members) got.push_back(p.id);
      return m.epoch == epoch && got == ids;
    }, timeout_ms);
  }
  // True once a change whose reason contains `text` arrived.
  bool wait_for_reason(const std::string& text, int64_t timeout_ms = 3000) {
    return wait([&](const Membership&, const std::string& r) { return r.find(text) != std::string::npos; },
                timeout_ms);
  }

 private:
  template <typename Pred>
  bool wait(Pred pred, int64_t timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, *in_ms(timeout_ms), [&] {
      return std::any_of(changes_.begin(), changes_.end(), [&](const auto& c) { return pred(c.first, c.second); });
    });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Membership, std::string>> changes_;
};

inline std::vector<uint8_t> encode_tensor(const compression::Pipeline& codec, const at::Tensor& t) {
  std::vector<uint8_t> out;
  codec.encode(t.contiguous().to(at::kFloat), out, 0);
  return out;
}

inline at::Tensor decode_tensor(const compression::Pipeline& codec, const std::vector<uint8_t>& frame, int64_t n) {
  at::Tensor out = at::empty({n}, at::kFloat);
  Status st = codec.decode(frame.data(), frame.size(), out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return out;
}

// A fresh directory under the system temp dir, removed with its contents at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "atoll-test-XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

}  // namespace atl::transport::testing
