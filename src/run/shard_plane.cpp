#include "src/run/shard_plane.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "src/base/bytes.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/run/data_plane.h"
#include "src/run/hosts.h"
#include "transport/zmq/curve.h"
#include "transport/zmq/zmq_group.h"

namespace atl::run {

namespace {

std::string shard_key(int island) { return "atoll/shards/" + std::to_string(island); }

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
std::vector<uint8_t> ShardDirectory::view() {
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

// Rank r's control plane: rank 0's latest view, with each member's rank-r endpoint. No store,
// records or server role: the shard plane runs all-reduces only.
class ShardPlane::Control final : public transport::ControlPlane {
 public:
  Control(int island, int rank) : island_(island), rank_(rank) {}
  int self() const override { return island_; }
  transport::Membership membership() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return view_;
  }
  transport::Membership wait_for_change(uint64_t epoch, transport::Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    transport::wait_until(cv_, lock, deadline, [&] { return view_.epoch != epoch; });
    return view_;
  }
  void suspect(int) override {}  // rank 0's view follows the coordinator's failure detector
  Status push(uint64_t, std::vector<uint8_t>, double) override { return unavailable(); }
  StatusOr<std::vector<uint8_t>> pull(uint64_t, transport::Deadline) override { return unavailable(); }
  Status store_set(const std::string&, std::vector<uint8_t>) override { return unavailable(); }
  StatusOr<std::vector<uint8_t>> store_get(const std::string&, transport::Deadline) override { return unavailable(); }
  void record(const std::string&) override {}

  void set(const std::vector<uint8_t>& bytes) {
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
    if (!r.done()) throw std::runtime_error("island ranks: malformed shard membership view");
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Rank 0's epochs as they are: the other islands' shard planes number their views alike.
      if (m.epoch == view_.epoch && m.members == view_.members) return;
      view_ = std::move(m);
    }
    cv_.notify_all();
  }

 private:
  static Status unavailable() {
    return Status(StatusCode::kUnavailable, "a shard plane has no store or server role (rank 0 speaks for the island)");
  }
  const int island_, rank_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  transport::Membership view_;
};

ShardPlane::ShardPlane(const config::Config& config, int island, int rank, uint64_t first_seq)
    : control_(std::make_unique<Control>(island, rank)) {
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

void ShardPlane::apply_view(const std::vector<uint8_t>& view) { control_->set(view); }

transport::ByteCounters ShardPlane::bytes() const { return plane_->bytes(); }

}  // namespace atl::run
