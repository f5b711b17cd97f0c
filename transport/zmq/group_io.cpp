#include "transport/zmq/group_io.h"

#include <malloc.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "src/base/log.h"
#include "transport/zmq/allreduce_op.h"
#include "transport/zmq/curve.h"

namespace atl::transport::dataplane {

namespace {

std::string bind_endpoint(const ControlPlane& control, const ZmqGroupOptions& o) {
  if (!o.bind.empty()) return o.bind;
  for (const Peer& p : control.membership().members) {
    if (p.id == control.self() && !p.endpoint.empty()) return p.endpoint;
  }
  throw std::invalid_argument("zmq data plane: island " + std::to_string(control.self()) +
                              " has no data endpoint in the membership and no ZmqGroupOptions::bind");
}

// The messages of an attempt (collectives/attempt.h), which a new epoch makes stale.
bool is_attempt_message(MsgType t) {
  return t == MsgType::kHello || t == MsgType::kAbsent || t == MsgType::kRing || t == MsgType::kDirect ||
         t == MsgType::kBroadcast || t == MsgType::kGather;
}

// libzmq mallocs every received message. With glibc's defaults, the megabytes freed after each
// burst of pieces go back to the kernel (heap trimming) and the next pieces fault them in
// again: on loopback that was about a sixth of the data plane's CPU time. Messages up to
// 32 MiB come from the heap, and up to 128 MiB of freed heap stay mapped for reuse. Process
// wide (the island process's data plane is its main allocator of large short-lived buffers);
// set once, by the first group.
void keep_freed_message_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 128 << 20);
  });
}

}  // namespace

GroupIo::GroupIo(ControlPlane& control, const ZmqGroupOptions& options)
    : control_(control), options_(options), self_(control.self()),
      pool_(std::make_shared<BufferPool>(4 * static_cast<size_t>(options.max_in_flight) + 64)), ctx_(1),
      bandwidth_(std::max(1e3, options.bandwidth_mbps * 1e6 / 8)) {
  TORCH_CHECK(options_.chunk_bytes >= 1024 && options_.chunk_bytes <= (int64_t{1} << 30),
              "ZmqGroupOptions::chunk_bytes must be in [1024, 2^30]");
  TORCH_CHECK(options_.timeout_slack >= 0 && options_.latency_ms >= 0 && options_.bandwidth_mbps > 0,
              "ZmqGroupOptions: timeout_slack and latency_ms must be >= 0, bandwidth_mbps > 0");
  TORCH_CHECK(options_.max_in_flight >= 1, "ZmqGroupOptions::max_in_flight must be >= 1");
  keep_freed_message_memory();
  if (options_.curve) {
    Status has = curve::available();
    TORCH_CHECK(has.is_ok(), "ZmqGroupOptions::curve: ", has.message());
    TORCH_CHECK(curve::valid_key_text(options_.curve_public_key) && curve::valid_key_text(options_.curve_secret_key),
                "ZmqGroupOptions::curve needs this island's Z85 key pair");
  }
  membership_ = control_.membership();
  links_ = std::make_unique<PeerLinks>(ctx_, self_, bind_endpoint(control_, options_), options_,
                                       [this] { return bandwidth_; }, drops_);
  endpoint_ = links_->endpoint();
  links_->set_peers(membership_.members);
  std::map<uint32_t, uint64_t> firsts = options.first_seqs;  // a joiner's sub-groups
  firsts[0] = options.first_seq;
  for (const auto& [key, first] : firsts) {
    groups_[key] = Sequence{{}, first, first, first, {}};
    links_->set_done_below(key, first);
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::runtime_error("zmq data plane: eventfd failed");
  thread_ = std::thread([this] { run(); });
}

GroupIo::~GroupIo() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  (void)eventfd_write(wake_fd_, 1);
  thread_.join();
  links_.reset();
  ::close(wake_fd_);
}

void GroupIo::submit(std::unique_ptr<AllreduceOp> op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_.push_back(std::move(op));
  }
  (void)eventfd_write(wake_fd_, 1);
}

MembershipView GroupIo::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {membership_.epoch, collective_members(membership_), self_};
}

void GroupIo::suspect(int peer) {
  ATOLL_WARN("zmq data plane: island " << self_ << " suspects island " << peer);
  control_.suspect(peer);
}

void GroupIo::observe_throughput(double bytes, double seconds) {
  if (bytes < double(1 << 20) || seconds <= 0) return;  // latency-bound samples say little
  const double sample = bytes / seconds;
  bandwidth_ = observed_ ? (1 - options_.bandwidth_ewma) * bandwidth_ + options_.bandwidth_ewma * sample : sample;
  observed_ = true;
}

void GroupIo::run() {
  Clock::time_point stop_at = Clock::time_point::max();
  for (;;) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stop_;
    }
    start_new_ops();
    Clock::time_point now = Clock::now();
    if (stopping) {
      if (stop_at == Clock::time_point::max()) stop_at = now + std::chrono::milliseconds(options_.linger_ms);
      if (links_->idle() || now >= stop_at) break;
    }
    Clock::time_point wake = std::min(next_refresh_, links_->next_timer());
    for (auto& [id, op] : ops_) wake = std::min(wake, op->next_timer());
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now);
    timeout = std::clamp(timeout, std::chrono::milliseconds(0), std::chrono::milliseconds(options_.poll_ms));
    if (refresh_due_) timeout = std::chrono::milliseconds(0);
    links_->poll(timeout, wake_fd_, [this](Inbound& m) { dispatch(m); });
    now = Clock::now();
    if (refresh_due_ || now >= next_refresh_) refresh();
    for (int peer : links_->check_timers(now)) suspect(peer);
    for (auto& [id, op] : ops_) op->on_timer(*this, now);
    reap();
  }
  for (auto& [id, op] : ops_) op->abandon(Status(StatusCode::kUnavailable, "the ZmqGroup was destroyed"));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& op : submitted_) op->abandon(Status(StatusCode::kUnavailable, "the ZmqGroup was destroyed"));
}

void GroupIo::start_new_ops() {
  std::vector<std::unique_ptr<AllreduceOp>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(submitted_);
  }
  if (fresh.empty()) return;
  // The island may have just seen a new epoch through the ControlPlane: start in that one,
  // not in a view up to poll_ms old.
  refresh();
  for (auto& op : fresh) {
    const Cid id{op->group(), op->seq()};
    Sequence& s = groups_[id.first];
    s.ids = op->ids();
    s.issued_below = id.second + 1;
    AllreduceOp& o = *op;
    ops_[id] = std::move(op);
    o.start(*this, membership_.epoch, collective_members(membership_, s.ids));
    auto kept = stash_.find(id);
    if (kept != stash_.end()) {
      for (Inbound& m : kept->second) {
        stash_bytes_ -= static_cast<int64_t>(m.size());
        o.on_message(*this, m);
      }
      stash_.erase(kept);
    }
  }
  reap();
}

void GroupIo::dispatch(Inbound& m) {
  const Header& h = m.header;
  const Cid id{h.group, h.seq};
  uint64_t& peer_done = peer_done_below_[{h.sender, h.group}];
  peer_done = std::max(peer_done, h.done_below);
  auto op = ops_.find(id);
  if (op != ops_.end() && op->second->done()) {  // finished in this batch: keep its result first
    reap();
    op = ops_.find(id);
  }
  if (op != ops_.end()) {
    op->second->on_message(*this, m);
    return;
  }
  if (auto it = retained_.find(id); it != retained_.end()) {
    if (h.type == MsgType::kHello && served_.insert({id, h.sender, h.epoch}).second) {
      ATOLL_INFO("zmq data plane: island " << self_ << " hands collective #" << h.seq << " (group " << h.group
                                           << ")'s result to island " << h.sender << " (it restarted it)");
      serve_result(*this, h.seq, h.epoch, *it->second, h.sender, h.group);
    }
    return;  // anything else for a finished collective is stale
  }
  static const Sequence kUnknown;  // a sub-group not made here yet: nothing issued
  auto known = groups_.find(h.group);
  const Sequence& s = known != groups_.end() ? known->second : kUnknown;
  if (h.seq < s.first) {
    if (h.type == MsgType::kHello) answer_absent(h);
    return;
  }
  if (h.seq >= s.issued_below) {  // a collective this island has not issued yet
    if (stash_bytes_ + static_cast<int64_t>(m.size()) > options_.max_stash_bytes) {
      drops_.drop("stash full", "collective #" + std::to_string(h.seq) + " from island " + std::to_string(h.sender));
      return;
    }
    stash_bytes_ += static_cast<int64_t>(m.size());
    stash_[id].push_back(std::move(m));
    return;
  }
  if (h.type == MsgType::kHello) {
    drops_.drop("HELLO for a finished collective no longer kept",
                "collective #" + std::to_string(h.seq) + " from island " + std::to_string(h.sender));
  }
}

void GroupIo::answer_absent(const Header& hello) {
  Header h;
  h.type = MsgType::kAbsent;
  h.sender = self_;
  h.epoch = hello.epoch;
  h.seq = hello.seq;
  h.group = hello.group;
  send(hello.sender, Outbound{h, nullptr, 0, 0, 0});
}

void GroupIo::refresh() {
  refresh_due_ = false;
  next_refresh_ = Clock::now() + std::chrono::milliseconds(options_.poll_ms);
  Membership m = control_.membership();
  if (m.epoch == membership_.epoch) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    membership_ = m;
  }
  ATOLL_INFO("zmq data plane: island " << self_ << " sees epoch " << m.epoch << " ("
                                       << collective_members(m).size() << " members)");
  links_->set_peers(m.members);
  // Every unfinished collective restarts in the new epoch: its queued messages are stale.
  links_->purge([&](const Header& h) { return is_attempt_message(h.type) && h.epoch < m.epoch; });
  for (auto& [id, op] : ops_) op->on_membership(*this, m.epoch, collective_members(m, op->ids()));
}

void GroupIo::reap() {
  for (auto it = ops_.begin(); it != ops_.end();) {
    if (!it->second->done()) {
      ++it;
      continue;
    }
    if (auto kept = it->second->take_retained()) retained_[it->first] = std::move(kept);
    Sequence& s = groups_[it->first.first];
    s.done_above.insert(it->first.second);
    while (!s.done_above.empty() && *s.done_above.begin() == s.done_below) {
      s.done_above.erase(s.done_above.begin());
      ++s.done_below;
    }
    links_->set_done_below(it->first.first, s.done_below);
    it = ops_.erase(it);
  }
  // A kept result is dropped once every other member of its group has finished that
  // collective, or when its group keeps more than max_retained.
  std::map<uint32_t, int> kept;
  for (const auto& [id, r] : retained_) ++kept[id.first];
  for (auto it = retained_.begin(); it != retained_.end();) {
    const auto [group, seq] = it->first;
    const std::vector<int>& ids = groups_[group].ids;
    bool all = true;
    for (const Peer& p : membership_.members) {
      const bool in_group = ids.empty() || std::binary_search(ids.begin(), ids.end(), p.id);
      if (p.id != self_ && in_group && peer_done_below_[{p.id, group}] <= seq) all = false;
    }
    if (all || kept[group] > options_.max_retained) {
      --kept[group];
      const Cid id = it->first;
      std::erase_if(served_, [id](const auto& s) { return std::get<0>(s) == id; });
      tensors_.give(std::move(it->second->kept.values));
      it = retained_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace atl::transport::dataplane
