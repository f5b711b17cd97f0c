#include "src/run/shard_plane.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <mutex>
#include <thread>
#include <utility>

#include "src/base/bytes.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/run/data_plane.h"
#include "src/run/hosts.h"
#include "src/run/island_ranks.h"
#include "src/run/wan.h"
#include "transport/zmq/curve.h"
#include "transport/zmq/zmq_group.h"

namespace atl::run {

namespace {

std::string shard_key(int island) { return "atoll/shards/" + std::to_string(island); }
// The key of rank 0's view in the island's c10d store.
const char kViewKey[] = "atoll/shard_view";
// Rank r's requests to the coordinator's store through rank 0 (a gloo shard plane's
// rendezvous): request n at "atoll/proxy/<r>/req/<n>", its answer at ".../ans/<n>".
std::string proxy_key(int rank, const char* what, int64_t n) {
  return "atoll/proxy/" + std::to_string(rank) + "/" + what + "/" + std::to_string(n);
}

// A client of the island's c10d store, of this thread's own.
c10::intrusive_ptr<c10d::TCPStore> store_client(const RankPlace& place) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(place.port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(30);
  return c10::make_intrusive<c10d::TCPStore>(place.rank0_host, o);
}

// An island's shard endpoints in the coordinator's store: u64 count, then each as a string.
std::vector<std::string> decode_endpoints(const std::vector<uint8_t>& bytes) {
  const std::string text(bytes.begin(), bytes.end());
  bytes::Reader r(text, "shard endpoints");
  const uint64_t n = r.u64();
  if (!r.ok() || n > 256) return {};  // ranks of an island: shard_key holds fewer than 256
  std::vector<std::string> out(n);
  for (std::string& e : out) e = r.str();
  return r.done() ? out : std::vector<std::string>{};
}

}  // namespace

const ShardFault& shard_fault() {
  static const ShardFault fault = [] {
    ShardFault f;
    const char* v = std::getenv("ATOLL_SHARD_FAULT");
    long long n = 0;
    int k = -1;
    if (v && std::sscanf(v, "rerun:%lld:%d", &n, &k) == 2 && n > 0 && k >= 0) {
      f.rerun_exchange = n;
      f.rerun_shard = k;
    } else if (v && std::sscanf(v, "slow_views:%d", &k) == 1 && k > 0) {
      f.slow_views_ms = k;
    }
    return f;
  }();
  return fault;
}

Status ShardDirectory::publish(int island, const std::vector<std::string>& endpoints) {
  bytes::ByteWriter w;
  w.u64(endpoints.size());
  for (const std::string& e : endpoints) w.str(e);
  std::string text = std::move(w).bytes();
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
        if (got.is_ok()) eps = decode_endpoints(got.value());
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
  Control(int island, int rank, const RankPlace& place, std::map<int, std::string> routes)
      : island_(island), rank_(rank), place_(place), routes_(std::move(routes)) {}
  int self() const override { return island_; }
  transport::Membership membership() const override {
    std::lock_guard<std::mutex> lock(mu_);
    read();
    return view_;
  }
  // Reads rank 0's view until it is of `epoch` or later (rank 0's when this rank's collective
  // starts), or the deadline passes.
  void catch_up(uint64_t epoch, transport::Clock::time_point deadline) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        next_read_ = {};
        read();
        if (view_.epoch >= epoch) return;
      }
      if (transport::Clock::now() >= deadline) {
        ATOLL_WARN("island " << island_ << " rank " << rank_ << ": rank 0's membership of epoch " << epoch
                             << " has not reached this shard plane; it goes on with epoch " << view_.epoch);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
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
  // Through rank 0 (ShardViews): a gloo shard plane's rendezvous.
  Status store_set(const std::string& key, std::vector<uint8_t> value) override {
    return ask(key, std::move(value), false, std::nullopt).status();
  }
  StatusOr<std::vector<uint8_t>> store_get(const std::string& key, transport::Deadline deadline) override {
    return ask(key, {}, true, deadline);
  }
  void record(const std::string&) override {}

 private:
  // Request: u8 get, str key, bytes value, i64 wait_ms. Answer: u8 status code, str message,
  // bytes value.
  StatusOr<std::vector<uint8_t>> ask(const std::string& key, std::vector<uint8_t> value, bool get,
                                     transport::Deadline deadline) {
    std::lock_guard<std::mutex> lock(ask_mu_);
    try {
      if (!asker_) asker_ = store_client(place_);
      const int64_t n = asker_->add("atoll/proxy/" + std::to_string(rank_) + "/next", 1);
      bytes::ByteWriter w;
      w.u8(get ? 1 : 0);
      w.str(key);
      w.str(std::string(value.begin(), value.end()));
      const auto wait = deadline ? std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - transport::Clock::now())
                                 : std::chrono::milliseconds(-1);
      w.i64(std::max<int64_t>(wait.count(), deadline ? 0 : -1));
      std::string req = std::move(w).bytes();
      asker_->set(proxy_key(rank_, "req", n), std::vector<uint8_t>(req.begin(), req.end()));
      const std::string ans_key = proxy_key(rank_, "ans", n);
      // Rank 0 answers by the deadline (plus its poll); a rank 0 that is gone never does.
      const auto give_up = (deadline ? *deadline : transport::Clock::now() + std::chrono::hours(1)) + std::chrono::seconds(5);
      while (!asker_->check({ans_key})) {
        if (transport::Clock::now() > give_up)
          return Status(StatusCode::kTimeout, "rank 0 did not answer a store request for '" + key + "'");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      const std::vector<uint8_t> got = asker_->get(ans_key);
      asker_->deleteKey(ans_key);
      const std::string text(got.begin(), got.end());
      bytes::Reader r(text, "store answer");
      const auto code = static_cast<StatusCode>(r.u8());
      std::string message = r.str();
      const std::string v = r.str();
      if (!r.done()) return Status(StatusCode::kInternal, "malformed store answer from rank 0");
      if (code != StatusCode::kOk) return Status(code, message);
      return std::vector<uint8_t>(v.begin(), v.end());
    } catch (const std::exception& e) {
      return Status(StatusCode::kUnavailable, std::string("the island's store: ") + e.what());
    }
  }

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
      // launch --emulate-wan: a peer's plane through the relay of this island's link to it.
      if (auto route = routes_.find(p.id); route != routes_.end() && p.id != island_ && transport::in_collectives(p))
        p.endpoint = route->second;
      m.members.push_back(std::move(p));
    }
    if (!r.done()) throw std::runtime_error("malformed shard membership view");
    return m;
  }

  const int island_, rank_;
  const RankPlace place_;
  const std::map<int, std::string> routes_;  // peer -> the endpoint to dial it at
  std::mutex ask_mu_;
  c10::intrusive_ptr<c10d::TCPStore> asker_;
  mutable std::mutex mu_;
  mutable c10::intrusive_ptr<c10d::TCPStore> store_;
  mutable transport::Clock::time_point next_read_{};
  mutable std::vector<uint8_t> last_;
  mutable transport::Membership view_;
};

struct ShardViews::Thread {
  std::atomic<bool> stop{false};
  std::thread thread;
  std::vector<std::thread> proxies;  // one per rank >= 1: its requests to the coordinator's store
};

namespace {

// Serves rank r's store requests (ShardPlane::Control::ask) in order, until `stop`.
void serve_proxy(const std::atomic<bool>& stop, transport::ControlPlane& control, const RankPlace& place, int rank) {
  auto store = store_client(place);
  for (int64_t n = 1; !stop;) {
    try {
      const std::string req_key = proxy_key(rank, "req", n);
      if (!store->check({req_key})) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      const std::vector<uint8_t> req = store->get(req_key);
      store->deleteKey(req_key);
      const std::string text(req.begin(), req.end());
      bytes::Reader r(text, "store request");
      const bool get = r.u8() != 0;
      const std::string key = r.str();
      const std::string value = r.str();
      const int64_t wait_ms = r.i64();
      Status st = r.done() ? Status::ok() : Status(StatusCode::kInvalidArgument, "malformed store request");
      std::vector<uint8_t> out;
      if (st.is_ok() && get) {
        auto v = control.store_get(key, wait_ms < 0 ? transport::Deadline{}
                                                    : transport::Clock::now() + std::chrono::milliseconds(wait_ms));
        if (v.is_ok()) out = std::move(v.value());
        else st = v.status();
      } else if (st.is_ok()) {
        st = control.store_set(key, std::vector<uint8_t>(value.begin(), value.end()));
      }
      bytes::ByteWriter w;
      w.u8(static_cast<uint8_t>(st.code()));
      w.str(st.message());
      w.str(std::string(out.begin(), out.end()));
      std::string ans = std::move(w).bytes();
      store->set(proxy_key(rank, "ans", n), std::vector<uint8_t>(ans.begin(), ans.end()));
      ++n;
    } catch (const std::exception& e) {
      ATOLL_DEBUG("shard store proxy of rank " << rank << ": " << e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

}  // namespace

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
          if (shard_fault().slow_views_ms > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(shard_fault().slow_views_ms));
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
  for (int r = 1; r < place.ranks; ++r)
    t.proxies.emplace_back([&t, &control, place, r] { serve_proxy(t.stop, control, place, r); });
}

ShardViews::~ShardViews() {
  thread_->stop = true;
  thread_->thread.join();
  for (std::thread& p : thread_->proxies) p.join();
}

ShardPlane::ShardPlane(const config::Config& config, const RankPlace& place, uint64_t first_seq,
                       std::map<uint32_t, uint64_t> first_seqs, std::map<int, std::string> routes)
    : control_(std::make_unique<Control>(place.island, place.rank, place, routes)) {
  const int island = place.island;
  const auto& t = config.transport;
  DataPlaneStart where;
  where.first_seq = first_seq;
  where.first_seqs = std::move(first_seqs);
  // An ephemeral port (ranks of several islands share a node), or with routed peers (launch
  // --emulate-wan) the one the relays forward to.
  where.bind = "tcp://" + t.host + ":" + (routes.empty() ? std::string("*") : std::to_string(shard_plane_port(config, island, place.rank)));
  if (t.curve) {  // the island's key pair, as rank 0's
    auto keys = transport::curve::load_keypair(t.keys_dir, "island-" + std::to_string(island));
    if (!keys.is_ok()) throw UserError("transport.keys_dir: " + keys.status().message());
    where.curve_public_key = keys.value().public_key;
    where.curve_secret_key = keys.value().secret_key;
  }
  // gloo: its rendezvous keys apart from rank 0's and the other ranks' planes.
  where.store_prefix = "gloo/shard" + std::to_string(place.rank) + "/";
  plane_ = make_data_plane(t, *control_, std::move(where));
  if (const auto* zmq = dynamic_cast<const transport::ZmqGroup*>(plane_.get())) {
    const std::string bound = zmq->endpoint();
    published_ = "tcp://" + island_address(t) + bound.substr(bound.rfind(':'));
  } else {  // gloo's pairs meet through the store: a name that says which plane it is
    published_ = t.kind + "://" + island_address(t) + "/island" + std::to_string(island) + "/rank" + std::to_string(place.rank);
  }
}

ShardPlane::~ShardPlane() = default;

transport::Group& ShardPlane::group() { return *plane_; }

transport::ByteCounters ShardPlane::bytes() const { return plane_->bytes(); }

void ShardPlane::catch_up(uint64_t epoch) { control_->catch_up(epoch, transport::Clock::now() + std::chrono::seconds(10)); }

}  // namespace atl::run
