#include "src/run/shard_plane.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>

#include "src/base/bytes.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/run/data_plane.h"
#include "src/run/hosts.h"
#include "src/run/island_ranks.h"
#include "transport/zmq/curve.h"
#include "transport/zmq/zmq_group.h"

namespace atl::run {

namespace {

std::string shard_key(int island) { return "atoll/shards/" + std::to_string(island); }
// The key of rank 0's view in the island's c10d store.
const char kViewKey[] = "atoll/shard_view";

// A client of the island's c10d store, of this thread's own.
c10::intrusive_ptr<c10d::TCPStore> store_client(const RankPlace& place) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(place.port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(30);
  return c10::make_intrusive<c10d::TCPStore>(place.rank0_host, o);
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find(' ', at);
    if (end == std::string::npos) end = s.size();
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace

Status ShardDirectory::publish(int island, const std::vector<std::string>& endpoints) {
  std::string text;
  for (const std::string& e : endpoints) text += (text.empty() ? "" : " ") + e;
  return control_.store_set(shard_key(island), {text.begin(), text.end()});
}

// Encoded: epoch, then per member its id, public key and its ranks 1..R-1 shard endpoints
// (none while it takes part in no collective).
std::vector<uint8_t> ShardDirectory::view(bool* complete) {
  if (complete) *complete = true;
  const transport::Membership m = control_.membership();
  // A member that left and came back has new shard planes (new ports) under the same data
  // endpoint: every change of the membership reads them again.
  if (m.epoch != epoch_) known_.clear();
  epoch_ = m.epoch;
  bytes::ByteWriter w;
  w.u64(m.epoch);
  w.u64(m.members.size());
  for (const transport::Peer& p : m.members) {
    std::vector<std::string> shards;
    if (transport::in_collectives(p)) {
      auto it = known_.find(p.id);
      if (it == known_.end()) {
        // Set before the member published its data endpoint: there already.
        auto got = control_.store_get(shard_key(p.id), transport::Clock::now() + std::chrono::seconds(10));
        std::vector<std::string> eps;
        if (got.is_ok()) eps = split_words(std::string(got.value().begin(), got.value().end()));
        if (static_cast<int>(eps.size()) != ranks_ - 1) {
          ATOLL_WARN("island " << control_.self() << ": no shard endpoints of island " << p.id << " ("
                               << (got.is_ok() ? "malformed" : got.status().to_string()) << ")");
          eps.assign(static_cast<size_t>(ranks_ - 1), "");
          if (complete) *complete = false;
        } else {
          it = known_.emplace(p.id, eps).first;
        }
        shards = std::move(eps);
      } else {
        shards = it->second;
      }
    }
    w.i64(p.id);
    w.str(p.public_key);
    w.u64(shards.size());
    for (const std::string& e : shards) w.str(e);
  }
  std::string s = std::move(w).bytes();
  return {s.begin(), s.end()};
}

// Rank r's control plane: rank 0's latest view (ShardViews), with each member's rank-r
// endpoint, read from the island's c10d store at most every 20 ms. No store, records or
// server role: the shard plane runs all-reduces only.
class ShardPlane::Control final : public transport::ControlPlane {
 public:
  Control(int island, int rank, const RankPlace& place) : island_(island), rank_(rank), place_(place) {}
  int self() const override { return island_; }
  transport::Membership membership() const override {
    std::lock_guard<std::mutex> lock(mu_);
    read();
    return view_;
  }
  transport::Membership wait_for_change(uint64_t epoch, transport::Deadline deadline) override {
    for (;;) {
      transport::Membership m = membership();
      if (m.epoch != epoch || (deadline && transport::Clock::now() >= *deadline)) return m;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void suspect(int) override {}  // rank 0's view follows the coordinator's failure detector
  Status push(uint64_t, std::vector<uint8_t>, double) override { return unavailable(); }
  StatusOr<std::vector<uint8_t>> pull(uint64_t, transport::Deadline) override { return unavailable(); }
  Status store_set(const std::string&, std::vector<uint8_t>) override { return unavailable(); }
  StatusOr<std::vector<uint8_t>> store_get(const std::string&, transport::Deadline) override { return unavailable(); }
  void record(const std::string&) override {}

 private:
  static Status unavailable() {
    return Status(StatusCode::kUnavailable, "a shard plane has no store or server role (rank 0 speaks for the island)");
  }
  // Under mu_. A store that does not answer (rank 0 gone) leaves the view as it was: the
  // rank's next c10d operation ends it.
  void read() const {
    const auto now = transport::Clock::now();
    if (now < next_read_) return;
    next_read_ = now + std::chrono::milliseconds(20);
    try {
      if (!store_) store_ = store_client(place_);
      if (!store_->check({kViewKey})) return;
      const std::vector<uint8_t> bytes = store_->get(kViewKey);
      if (bytes == last_) return;
      view_ = decode(bytes);
      last_ = bytes;
    } catch (const std::exception& e) {
      ATOLL_DEBUG("island " << island_ << " rank " << rank_ << ": rank 0's view: " << e.what());
    }
  }
  transport::Membership decode(const std::vector<uint8_t>& bytes) const {
    const std::string text(bytes.begin(), bytes.end());
    bytes::Reader r(text, "shard membership view");
    transport::Membership m;
    m.epoch = r.u64();
    const uint64_t n = r.u64();
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      transport::Peer p;
      p.id = static_cast<int>(r.i64());
      p.public_key = r.str();
      const uint64_t k = r.u64();
      for (uint64_t j = 0; j < k && r.ok(); ++j) {
        std::string e = r.str();
        if (static_cast<int>(j) == rank_ - 1) p.endpoint = std::move(e);
      }
      m.members.push_back(std::move(p));
    }
    if (!r.done()) throw std::runtime_error("malformed shard membership view");
    return m;
  }

  const int island_, rank_;
  const RankPlace place_;
  mutable std::mutex mu_;
  mutable c10::intrusive_ptr<c10d::TCPStore> store_;
  mutable transport::Clock::time_point next_read_{};
  mutable std::vector<uint8_t> last_;
  mutable transport::Membership view_;
};

struct ShardViews::Thread {
  std::atomic<bool> stop{false};
  std::thread thread;
};

ShardViews::ShardViews(ShardDirectory& directory, transport::ControlPlane& control, const RankPlace& place)
    : thread_(std::make_unique<Thread>()) {
  Thread& t = *thread_;
  auto store = store_client(place);  // before the thread: a failure here is the caller's
  t.thread = std::thread([&t, &directory, &control, store]() {
    uint64_t written = UINT64_MAX;
    while (!t.stop) {
      try {
        const uint64_t epoch = control.membership().epoch;
        if (epoch != written) {
          bool complete = false;
          store->set(kViewKey, directory.view(&complete));
          if (complete) written = epoch;  // else read the missing endpoints again
        }
      } catch (const std::exception& e) {
        ATOLL_DEBUG("shard views: " << e.what());
      }
      control.wait_for_change(written, transport::Clock::now() + std::chrono::milliseconds(100));
    }
  });
}

ShardViews::~ShardViews() {
  thread_->stop = true;
  thread_->thread.join();
}

ShardPlane::ShardPlane(const config::Config& config, const RankPlace& place, uint64_t first_seq)
    : control_(std::make_unique<Control>(place.island, place.rank, place)) {
  const int island = place.island;
  const auto& t = config.transport;
  DataPlaneStart where;
  where.first_seq = first_seq;
  where.bind = "tcp://" + t.host + ":*";  // an ephemeral port: ranks of several islands share a node
  if (t.curve) {  // the island's key pair, as rank 0's
    auto keys = transport::curve::load_keypair(t.keys_dir, "island-" + std::to_string(island));
    if (!keys.is_ok()) throw UserError("transport.keys_dir: " + keys.status().message());
    where.curve_public_key = keys.value().public_key;
    where.curve_secret_key = keys.value().secret_key;
  }
  plane_ = make_data_plane(t, *control_, std::move(where));
  const auto* zmq = dynamic_cast<const transport::ZmqGroup*>(plane_.get());
  TORCH_CHECK(zmq != nullptr, "a shard plane is a ZeroMQ data plane (validation refuses other transports)");
  const std::string bound = zmq->endpoint();
  published_ = "tcp://" + island_address(t) + bound.substr(bound.rfind(':'));
}

ShardPlane::~ShardPlane() = default;

transport::Group& ShardPlane::group() { return *plane_; }

transport::ByteCounters ShardPlane::bytes() const { return plane_->bytes(); }

}  // namespace atl::run
