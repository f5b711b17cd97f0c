#include "transport/inproc/inproc_group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "transport/ring.h"
#include "transport/star.h"

namespace atl::transport {

// Handle of a matched collective: completes when every member has contributed (and, on the
// virtual clock, once the caller's time has reached the collective's completion).
class InprocHandle final : public Handle {
 public:
  InprocHandle(InprocHub& hub, int self, uint64_t seq)
      : hub_(hub), self_(self), seq_(seq), posted_(hub.scheduler_.time(self)) {}
  ~InprocHandle() override {
    // After an abort every thread unwinds at once: leave the hub alone.
    if (!collected_ && !hub_.scheduler_.aborted()) collect();
  }
  bool done() const override {
    if (collected_) return true;
    hub_.scheduler_.yield(self_);  // islands earlier on the clock may still post
    const auto& c = hub_.collectives_.at(seq_);
    return c.done && c.done_at <= hub_.scheduler_.time(self_);
  }
  CollectiveResult wait(Deadline) override {
    if (collected_) return result_;
    auto& c = hub_.collectives_.at(seq_);
    if (!c.done) {
      hub_.scheduler_.block_until(
          self_, [this] { return hub_.collectives_.at(seq_).done; },
          "collective #" + std::to_string(seq_));
    }
    const auto& finished = hub_.collectives_.at(seq_);
    const double start = finished.start, done_at = finished.done_at;
    collect();
    hub_.resume(self_, posted_, start, done_at);
    return result_;
  }

 private:
  void collect() {
    auto it = hub_.collectives_.find(seq_);
    if (it == hub_.collectives_.end()) return;
    result_ = it->second.result;
    collected_ = true;
    if (--it->second.waiting == 0 && it->second.done) hub_.collectives_.erase(it);
  }
  InprocHub& hub_;
  int self_;
  uint64_t seq_;
  double posted_;  // the caller's virtual time when it posted its contribution
  bool collected_ = false;
  CollectiveResult result_;
};

class InprocGroup final : public Group {
 public:
  InprocGroup(InprocHub& hub, int id) : hub_(hub), id_(id), seq_(hub.next_seq_[static_cast<size_t>(id)]) {}

  MembershipView view() const override {
    hub_.scheduler_.yield(id_);  // deaths earlier on the clock have happened
    return {hub_.epoch_, hub_.members_, id_};
  }

  std::unique_ptr<Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                         double weight, at::Tensor transmitted) override {
    TORCH_CHECK(weight > 0, "allreduce_mean weight must be > 0");
    return contribute(InprocHub::Kind::kAllreduce, -1, std::move(buffer), codec, weight,
                      std::move(transmitted));
  }

  std::unique_ptr<Handle> broadcast(int root, at::Tensor buffer,
                                    const compression::Pipeline& codec) override {
    return contribute(InprocHub::Kind::kBroadcast, root, std::move(buffer), codec, 1.0);
  }

  std::unique_ptr<Handle> push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec,
                               double weight, at::Tensor transmitted) override {
    TORCH_CHECK(hub_.server_ != nullptr, "push: no server role in this simulation");
    hub_.scheduler_.yield(id_);  // pushes reach the server in virtual-time order
    at::Tensor received = at::empty_like(buffer);
    hub_.transfer(id_, -1, buffer, received, codec, (tag << 16) ^ static_cast<uint64_t>(id_));
    if (transmitted.defined()) transmitted.copy_(received);
    const double posted = hub_.scheduler_.time(id_);
    double arrival = posted;
    hub_.end_phase(arrival);
    // The server applies pushes in arrival order: whatever is earlier on the clock goes first.
    hub_.resume(id_, posted, posted, arrival);
    hub_.scheduler_.yield(id_);
    hub_.last_push_arrival_ = std::max(hub_.last_push_arrival_, arrival);
    hub_.server_->on_push(id_, tag, received, weight);
    return std::make_unique<DoneHandle>(CollectiveResult{Status::ok(), {id_}, weight});
  }

  std::unique_ptr<Handle> pull(uint64_t tag, at::Tensor out,
                               const compression::Pipeline& codec) override {
    TORCH_CHECK(hub_.server_ != nullptr, "pull: no server role in this simulation");
    hub_.scheduler_.yield(id_);
    OuterServer* server = hub_.server_;
    const int self = id_;
    const double posted = hub_.scheduler_.time(id_);
    const bool ready = server->on_pull(self, tag).has_value();
    if (!ready) {
      hub_.scheduler_.block_until(
          id_, [server, self, tag] { return server->on_pull(self, tag).has_value(); },
          "server answer to tag " + std::to_string(tag));
    }
    // An answer that needed other islands' pushes exists once the latest of them arrived.
    const double available = ready ? posted : std::max(posted, hub_.last_push_arrival_);
    at::Tensor answer = *server->on_pull(id_, tag);
    hub_.transfer(-1, id_, answer, out, codec);
    double arrival = available;
    hub_.end_phase(arrival);
    hub_.resume(id_, posted, available, arrival);
    return std::make_unique<DoneHandle>(CollectiveResult{Status::ok(), {id_}, 1.0});
  }

  ByteCounters bytes() const override { return hub_.counters_[id_]; }

 private:
  std::unique_ptr<Handle> contribute(InprocHub::Kind kind, int root, at::Tensor buffer,
                                     const compression::Pipeline& codec, double weight,
                                     at::Tensor transmitted = {}) {
    TORCH_CHECK(buffer.is_contiguous() && buffer.scalar_type() == at::kFloat && buffer.device().is_cpu(),
                "collectives take contiguous float32 CPU buffers");
    hub_.scheduler_.yield(id_);  // islands earlier on the clock post first
    const uint64_t seq = seq_++;
    hub_.next_seq_[static_cast<size_t>(id_)] = seq_;
    auto& c = hub_.collectives_[seq];
    if (c.contributions.empty()) {
      c.kind = kind;
      c.root = root;
    }
    TORCH_CHECK(c.kind == kind && c.root == root,
                "collective #", seq, ": members issued different collectives");
    if (!c.contributions.empty()) {
      TORCH_CHECK(c.contributions.begin()->second.buffer.numel() == buffer.numel(),
                  "collective #", seq, ": members passed buffers of different sizes");
    }
    if (transmitted.defined()) {
      TORCH_CHECK(transmitted.numel() == buffer.numel() && transmitted.is_contiguous(),
                  "allreduce_mean: `transmitted` must match the buffer");
    }
    c.contributions[id_] = {std::move(buffer), &codec, weight, std::move(transmitted)};
    ++c.waiting;
    c.start = std::max(c.start, hub_.scheduler_.time(id_));
    auto handle = std::make_unique<InprocHandle>(hub_, id_, seq);
    if (c.contributions.size() == hub_.participants(seq)) hub_.complete(c, seq);
    return handle;
  }

  InprocHub& hub_;
  int id_;
  uint64_t seq_ = 0;
};

InprocHub::InprocHub(int islands, Scheduler& scheduler)
    : scheduler_(scheduler), counters_(static_cast<size_t>(islands)),
      waits_(static_cast<size_t>(islands)), first_seq_(static_cast<size_t>(islands), 0),
      next_seq_(static_cast<size_t>(islands), 0) {
  for (int i = 0; i < islands; ++i) members_.push_back(i);
}

void InprocHub::set_network(const NetworkModel* network, uint64_t seed, double detect_s) {
  network_ = network;
  rng_.seed(seed ^ 0x6e6574776f726bULL);
  detect_s_ = detect_s;
}

void InprocHub::complete(Collective& c, uint64_t seq) {
  // Members that posted before a failure was noticed were waiting for the dead island.
  if (c.start < detected_at_ && c.contributions.size() > 0) c.start = detected_at_;
  if (c.kind == Kind::kAllreduce) run_allreduce(c, seq);
  else run_broadcast(c);
  c.done = true;
}

void InprocHub::end_phase(double& clock) {
  if (!network_ || phase_.empty()) {
    phase_.clear();
    return;
  }
  // Held until every path of the phase is up at once (cuts on different pairs may chain).
  for (double before = -1; before != clock;) {
    before = clock;
    for (const Transfer& t : phase_) clock = std::max(clock, network_->connected_at(t.from, t.to, clock));
  }
  clock += network_->phase_time(phase_, rng_);
  phase_.clear();
}

void InprocHub::resume(int self, double posted, double start, double ready_at) {
  const double now = scheduler_.time(self);
  if (ready_at <= now) return;
  WaitTime& w = waits_[static_cast<size_t>(self)];
  const double idle = std::max(0.0, std::min(start, ready_at) - std::max(now, posted));
  w.idle_s += idle;
  w.comm_s += ready_at - now - idle;
  scheduler_.advance(self, ready_at);
}

size_t InprocHub::participants(uint64_t seq) const {
  size_t n = 0;
  for (int m : members_) n += first_seq_[static_cast<size_t>(m)] <= seq;
  return n;
}

void InprocHub::add_member(int id, uint64_t first_seq) {
  TORCH_CHECK(id >= 0 && id < size(), "no island ", id);
  TORCH_CHECK(std::find(members_.begin(), members_.end(), id) == members_.end(), "island ", id,
              " is already a member");
  members_.insert(std::upper_bound(members_.begin(), members_.end(), id), id);
  ++epoch_;
  first_seq_[static_cast<size_t>(id)] = first_seq;
  next_seq_[static_cast<size_t>(id)] = first_seq;
}

double InprocHub::hand_over(int from, int to, uint64_t bytes, double at) {
  counters_[static_cast<size_t>(from)].sent += bytes;
  counters_[static_cast<size_t>(from)].raw_sent += bytes;
  counters_[static_cast<size_t>(to)].received += bytes;
  if (!network_) return at;
  const double start = network_->connected_at(from, to, at);
  return start + network_->transfer_time({from, to, bytes}, rng_);
}

void InprocHub::remove_member(int id, double at, bool failure) {
  auto it = std::find(members_.begin(), members_.end(), id);
  if (it == members_.end()) return;
  members_.erase(it);
  ++epoch_;
  if (failure) detected_at_ = std::max(detected_at_, at + detect_s_);
  for (auto cit = collectives_.begin(); cit != collectives_.end();) {
    Collective& c = cit->second;
    if (!c.done) {
      c.contributions.erase(id);
      if (c.contributions.empty()) {
        cit = collectives_.erase(cit);
        continue;
      }
      if (c.contributions.size() == participants(cit->first)) {
        complete(c, cit->first);
      }
    }
    ++cit;
  }
}

InprocHub::~InprocHub() = default;

std::unique_ptr<Group> InprocHub::make_group(int id) {
  TORCH_CHECK(id >= 0 && id < size(), "no island ", id);
  return std::make_unique<InprocGroup>(*this, id);
}

void InprocHub::transfer(int from, int to, const at::Tensor& src, at::Tensor dst,
                         const compression::Pipeline& codec, uint64_t seed) {
  at::Tensor s = src.is_contiguous() ? src : src.contiguous();
  scratch_.clear();
  codec.encode(s, scratch_, seed);
  deliver(from, to, scratch_, s.numel(), std::move(dst), codec);
}

void InprocHub::deliver(int from, int to, const std::vector<uint8_t>& frame, int64_t raw_numel, at::Tensor dst,
                        const compression::Pipeline& codec) {
  if (from >= 0) {
    counters_[from].sent += frame.size();
    counters_[from].raw_sent += static_cast<uint64_t>(raw_numel) * sizeof(float);
  }
  if (to >= 0) counters_[to].received += frame.size();
  if (network_ && (from >= 0 || to >= 0)) phase_.push_back({from, to, frame.size()});
  Status st = codec.decode(frame.data(), frame.size(), dst);
  TORCH_CHECK(st.is_ok(), "in-process transfer failed to decode its own encoding: ", st.to_string());
}

void InprocHub::run_allreduce(Collective& c, uint64_t seq) {
  std::vector<int> ids;
  std::vector<Contribution*> parts;
  double weight_sum = 0;
  for (auto& [id, part] : c.contributions) {
    ids.push_back(id);
    parts.push_back(&part);
    weight_sum += part.weight;
  }
  c.result = {Status::ok(), ids, weight_sum};
  c.done_at = c.start;
  if (ids.size() == 1) {  // the mean of one buffer is that buffer, bitwise
    if (parts[0]->transmitted.defined()) parts[0]->transmitted.copy_(parts[0]->buffer);
    return;
  }
  if (star_) {  // the server weights what it decodes: no pre-multiplication here
    run_star(parts, ids, seq, c.done_at);
    return;
  }
  bool uniform = true;
  for (auto* p : parts) uniform = uniform && p->weight == parts[0]->weight;
  if (!uniform) {
    for (auto* p : parts) p->buffer.mul_(p->weight);
  }
  const double divisor = uniform ? static_cast<double>(ids.size()) : weight_sum;
  if (parts[0]->codec->lossless()) {
    for (auto* p : parts) {
      if (p->transmitted.defined()) p->transmitted.copy_(p->buffer);
    }
    run_ring(parts, ids, divisor, c.done_at);
  } else {
    run_direct(parts, ids, divisor, seq, c.done_at);
  }
}

void InprocHub::run_ring(std::vector<Contribution*>& parts, std::vector<int>& ids, double divisor,
                         double& clock) {
  const int w = static_cast<int>(ids.size());
  const int64_t n = parts[0]->buffer.numel();
  const auto& codec = *parts[0]->codec;
  auto slice = [&](int member, int chunk) {
    auto [b, e] = ring::chunk_bounds(n, w, chunk);
    return parts[member]->buffer.narrow(0, b, e - b);
  };
  at::Tensor incoming;
  // Reduce-scatter: W-1 steps; member r sends chunk (r - s) to r+1, which accumulates it.
  for (int s = 0; s < w - 1; ++s) {
    for (int r = 0; r < w; ++r) {
      const int chunk = ring::reduce_scatter_chunk(r, s, w);
      const int next = (r + 1) % w;
      at::Tensor src = slice(r, chunk);
      incoming = at::empty({src.numel()}, src.options());
      transfer(ids[r], ids[next], src, incoming, codec);
      slice(next, chunk).add_(incoming);
    }
    end_phase(clock);
  }
  // Member r now owns the sum of chunk (r + 1); turn it into the mean.
  for (int r = 0; r < w; ++r) slice(r, (r + 1) % w).div_(divisor);
  // All-gather: W-1 steps; member r forwards chunk (r + 1 - s) to r+1, which copies it.
  for (int s = 0; s < w - 1; ++s) {
    for (int r = 0; r < w; ++r) {
      const int chunk = ring::all_gather_chunk(r, s, w);
      const int next = (r + 1) % w;
      transfer(ids[r], ids[next], slice(r, chunk), slice(next, chunk), codec);
    }
    end_phase(clock);
  }
}

// Lossy codecs: chunk c is owned by member c. Every member encodes its chunk c once and
// sends it to the owner, who decodes all contributions and sums them in fp32 in member
// order; the owner encodes the mean once and sends it to everyone, keeping the decoded
// version itself so that all members end bitwise equal.
void InprocHub::run_direct(std::vector<Contribution*>& parts, std::vector<int>& ids,
                           double divisor, uint64_t seq, double& clock) {
  const int w = static_cast<int>(ids.size());
  const int64_t n = parts[0]->buffer.numel();
  const auto& codec = *parts[0]->codec;
  auto seed = [&](int sender, int chunk, int phase) {
    return ring::direct_seed(seq, ids[sender], chunk, phase);
  };
  std::vector<at::Tensor> sums(static_cast<size_t>(w));
  at::Tensor decoded;
  for (int c = 0; c < w; ++c) {
    auto [b, e] = ring::chunk_bounds(n, w, c);
    at::Tensor sum = at::zeros({e - b}, parts[0]->buffer.options());
    for (int r = 0; r < w; ++r) {
      at::Tensor src = parts[r]->buffer.narrow(0, b, e - b);
      if (r == c) {
        sum.add_(src);  // the owner's own chunk never leaves it
        if (parts[r]->transmitted.defined()) parts[r]->transmitted.narrow(0, b, e - b).copy_(src);
        continue;
      }
      decoded = at::empty({e - b}, src.options());
      transfer(ids[r], ids[c], src, decoded, codec, seed(r, c, 0));
      sum.add_(decoded);
      if (parts[r]->transmitted.defined()) parts[r]->transmitted.narrow(0, b, e - b).copy_(decoded);
    }
    sums[c] = sum.div_(divisor);
  }
  end_phase(clock);
  for (int c = 0; c < w; ++c) {
    auto [b, e] = ring::chunk_bounds(n, w, c);
    at::Tensor own = parts[c]->buffer.narrow(0, b, e - b);
    for (int r = 0; r < w; ++r) {
      if (r == c) continue;
      transfer(ids[c], ids[r], sums[c], parts[r]->buffer.narrow(0, b, e - b), codec, seed(c, c, 1));
    }
    transfer(-1, -1, sums[c], own, codec, seed(c, c, 1));  // what the others decoded
  }
  end_phase(clock);
}

// Star (transport/star.h): phase 1, every member's encoded buffer to the server; the server
// reduces the decoded contributions in member-id order; phase 2, the mean, encoded once, to
// every member. This is what the coordinator's StarReducer computes in real runs.
void InprocHub::run_star(std::vector<Contribution*>& parts, std::vector<int>& ids, uint64_t seq,
                         double& clock) {
  const auto& codec = *parts[0]->codec;
  std::vector<at::Tensor> decoded;
  std::vector<double> weights;
  for (size_t r = 0; r < parts.size(); ++r) {
    decoded.push_back(at::empty_like(parts[r]->buffer));
    transfer(ids[r], kServer, parts[r]->buffer, decoded.back(), codec, star::contribution_seed(seq, ids[r]));
    if (parts[r]->transmitted.defined()) parts[r]->transmitted.copy_(decoded.back());
    weights.push_back(parts[r]->weight);
  }
  end_phase(clock);
  const at::Tensor mean = star::mean(decoded, weights);
  std::vector<uint8_t> frame;
  codec.encode(mean, frame, star::mean_seed(seq));
  for (size_t r = 0; r < parts.size(); ++r) deliver(kServer, ids[r], frame, mean.numel(), parts[r]->buffer, codec);
  end_phase(clock);
}

void InprocHub::run_broadcast(Collective& c) {
  std::vector<int> ids;
  for (auto& [id, part] : c.contributions) ids.push_back(id);
  auto root_it = c.contributions.find(c.root);
  TORCH_CHECK(root_it != c.contributions.end(), "broadcast root ", c.root, " is not a member");
  const Contribution& root = root_it->second;
  for (auto& [id, part] : c.contributions) {
    if (id == c.root) continue;
    transfer(c.root, id, root.buffer, part.buffer, *root.codec);
  }
  c.done_at = c.start;
  end_phase(c.done_at);
  c.result = {Status::ok(), ids, static_cast<double>(ids.size())};
}

}  // namespace atl::transport
