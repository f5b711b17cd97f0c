#include "transport/inproc/inproc_group.h"

#include "transport/shards.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>

#include "transport/collectives/schedules.h"
#include "transport/ring.h"
#include "transport/shards.h"
#include "transport/star.h"

namespace atl::transport {

// Handle of a matched collective: completes when every member has contributed (and, on the
// virtual clock, once the caller's time has reached the collective's completion).
class InprocHandle final : public Handle {
 public:
  // Collective `id`, posted at the caller's virtual time `posted` (or restored from a checkpoint).
  InprocHandle(InprocHub& hub, int self, InprocHub::CollectiveId id, double posted)
      : hub_(hub), self_(self), id_(id), posted_(posted) {}
  ~InprocHandle() override {
    // After an abort every thread unwinds at once: leave the hub alone.
    if (!collected_ && !hub_.scheduler_.aborted()) collect();
  }
  bool done() const override {
    if (collected_) return true;
    hub_.scheduler_.yield(self_);  // islands earlier on the clock may still post
    const auto& c = hub_.collectives_.at(id_);
    return c.done && c.done_at <= hub_.scheduler_.time(self_);
  }
  CollectiveResult wait(Deadline) override {
    if (collected_) return result_;
    auto& c = hub_.collectives_.at(id_);
    if (!c.done) {
      hub_.scheduler_.block_until(
          self_, [this] { return hub_.collectives_.at(id_).done; },
          "collective #" + std::to_string(id_.second) + (id_.first ? " of sub-group " + std::to_string(id_.first) : ""));
    }
    const auto& finished = hub_.collectives_.at(id_);
    const double start = finished.start, done_at = finished.done_at;
    collect();
    hub_.resume(self_, posted_, start, done_at);
    return result_;
  }

 private:
  void collect() {
    auto it = hub_.collectives_.find(id_);
    if (it == hub_.collectives_.end()) return;
    result_ = it->second.result;
    collected_ = true;
    it->second.holders.erase(self_);
    if (--it->second.waiting == 0 && it->second.done) hub_.collectives_.erase(it);
  }
  InprocHub& hub_;
  int self_;
  InprocHub::CollectiveId id_;
  double posted_;  // the caller's virtual time when it posted its contribution
  bool collected_ = false;
  CollectiveResult result_;
};

class InprocGroup final : public Group {
 public:
  // The group of every island (key 0), or sub-group `key` of the islands `ids`.
  InprocGroup(InprocHub& hub, int id, uint32_t key = 0, std::vector<int> ids = {})
      : hub_(hub), id_(id), key_(key), ids_(std::move(ids)) {
    seq_ = hub.next_seq_of(key_, id_);
  }

  MembershipView view() const override {
    hub_.scheduler_.yield(id_);  // deaths earlier on the clock have happened
    return {hub_.st_.epoch, within(hub_.st_.members, ids_), id_};
  }

  std::unique_ptr<Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                         double weight, at::Tensor transmitted) override {
    check_allreduce(buffer, weight, transmitted);
    InprocHub::Contribution part;
    part.buffer = std::move(buffer);
    part.codec = &codec;
    part.weight = weight;
    part.transmitted = std::move(transmitted);
    return contribute(InprocHub::Kind::kAllreduce, -1, std::move(part));
  }

  std::unique_ptr<Handle> broadcast(int root, at::Tensor buffer,
                                    const compression::Pipeline& codec) override {
    check_buffer(buffer);
    InprocHub::Contribution part;
    part.buffer = std::move(buffer);
    part.codec = &codec;
    return contribute(InprocHub::Kind::kBroadcast, root, std::move(part));
  }

  std::unique_ptr<Handle> allgather(std::vector<uint8_t> bytes,
                                    std::vector<std::vector<uint8_t>>* out) override {
    TORCH_CHECK(out != nullptr, "allgather: no output");
    InprocHub::Contribution part;
    part.bytes = std::move(bytes);
    part.gathered = out;
    return contribute(InprocHub::Kind::kAllgather, -1, std::move(part));
  }

  std::unique_ptr<Group> subgroup(uint32_t key, std::vector<int> ids) override {
    check_subgroup(key, ids, id_);
    for (int m : ids) TORCH_CHECK(m >= 0 && m < hub_.size(), "subgroup: no island ", m);
    return std::make_unique<InprocGroup>(hub_, id_, key, std::move(ids));
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
    hub_.server_->on_time(arrival);
    hub_.st_.last_push_arrival = std::max(hub_.st_.last_push_arrival, arrival);
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
    server->on_time(posted);
    const bool ready = server->on_pull(self, tag).has_value();
    // Waits for the answer; a deadline of the server (fedavg's round_timeout_s) wakes it at
    // that virtual time, when no island earlier on the clock can still deliver, and the
    // server acts on it.
    while (!server->on_pull(self, tag).has_value()) {
      hub_.scheduler_.block_until(
          id_, [server, self, tag] { return server->on_pull(self, tag).has_value(); },
          "server answer to tag " + std::to_string(tag), [server] { return server->next_deadline(); });
      server->on_time(hub_.scheduler_.time(id_));
    }
    // An answer that needed other islands' pushes exists once the latest of them arrived; a
    // server that keeps the time its answers last changed (fedavg: a round closed, maybe at a
    // deadline or when a loss was noticed) says when.
    const double changed = server->changed_at();
    const double available = changed >= 0 ? std::max(posted, changed)
                                          : (ready ? posted : std::max(posted, hub_.st_.last_push_arrival));
    at::Tensor answer = *server->on_pull(id_, tag);
    hub_.transfer(-1, id_, answer, out, codec);
    double arrival = available;
    hub_.end_phase(arrival);
    hub_.resume(id_, posted, available, arrival);
    return std::make_unique<DoneHandle>(CollectiveResult{Status::ok(), {id_}, 1.0});
  }

  ByteCounters bytes() const override { return hub_.st_.counters[id_]; }

  std::unique_ptr<Handle> resume_in_flight() override {
    auto it = hub_.restored_.find(id_);
    if (it == hub_.restored_.end()) return nullptr;
    auto& list = it->second;
    auto found = std::find_if(list.begin(), list.end(), [&](const auto& r) { return r.first.first == key_; });
    if (found == list.end()) return nullptr;
    const auto [cid, posted] = *found;
    list.erase(found);
    return std::make_unique<InprocHandle>(hub_, id_, cid, posted);
  }

 private:
  std::unique_ptr<Handle> contribute(InprocHub::Kind kind, int root, InprocHub::Contribution part) {
    hub_.scheduler_.yield(id_);  // islands earlier on the clock post first
    const uint64_t seq = seq_++;
    hub_.next_seq_of(key_, id_) = seq_;
    const InprocHub::CollectiveId cid{key_, seq};
    auto& c = hub_.collectives_[cid];
    if (c.contributions.empty()) {
      c.kind = kind;
      c.root = root;
      c.ids = ids_;
      c.streams = hub_.rank_links_ ? 1 : shard_streams(key_);
    }
    TORCH_CHECK(c.kind == kind && c.root == root && c.ids == ids_,
                "collective #", seq, ": members issued different collectives");
    if (!c.contributions.empty() && kind != InprocHub::Kind::kAllgather) {
      TORCH_CHECK(c.contributions.begin()->second.buffer.numel() == part.buffer.numel(),
                  "collective #", seq, ": members passed buffers of different sizes");
    }
    c.contributions[id_] = std::move(part);
    ++c.waiting;
    const double now = hub_.scheduler_.time(id_);
    c.holders[id_] = now;
    c.start = std::max(c.start, now);
    auto handle = std::make_unique<InprocHandle>(hub_, id_, cid, now);
    if (c.contributions.size() == hub_.participants(c, key_, seq)) hub_.complete(c, seq);
    return handle;
  }

  InprocHub& hub_;
  int id_;
  uint32_t key_;
  std::vector<int> ids_;  // sub-group: its islands, ascending (empty: every island)
  uint64_t seq_ = 0;
};

// One member's wire in a collective run by InprocHub::run_programs: sends are counted and
// join the current network phase at once, and are delivered (made visible to their
// receiver) when the round ends. A payload is copied at send: its sender may end (and free
// its frames) in the round before the receiver reads it, and frees each frame once sent
// (copies_sends). A payload taken is valid until its program next suspends (the schedules
// consume each one before their next co_await; this wire keeps none, Wire::keep): then
// run_programs frees it (release_taken). So a collective holds about one round of messages,
// not all of them, while every member's program runs.
class InprocWire final : public collectives::Wire {
 public:
  using Message = std::vector<uint8_t>;
  // (from, to, tag, step, chunk, piece)
  using Key = std::tuple<int, int, uint8_t, uint32_t, uint32_t, uint32_t>;
  struct Mail {
    std::vector<std::pair<Key, Message>> pending;  // sent this round
    std::map<Key, Message> delivered;
  };

  InprocWire(InprocHub& hub, Mail& mail, int self) : hub_(hub), mail_(mail), self_(self) {}

  int self() const override { return self_; }
  // Every message is a compression frame (the simulator counts frame bytes).
  bool raw_fp32() const override { return false; }
  bool copies_sends() const override { return true; }
  void send(int to, const collectives::MsgKey& key, const uint8_t* data, size_t size, uint64_t raw_bytes,
            bool) override {
    hub_.count(self_, to, size, raw_bytes);
    mail_.pending.emplace_back(make_key(self_, to, key), Message(data, data + size));
  }
  collectives::RecvId post_recv(int from, const collectives::MsgKey& key, uint8_t*, size_t, bool) override {
    recvs_.push_back(make_key(from, self_, key));
    return static_cast<collectives::RecvId>(recvs_.size() - 1);
  }
  bool ready(collectives::RecvId id) override { return mail_.delivered.count(recvs_.at(static_cast<size_t>(id))) > 0; }
  collectives::Payload take(collectives::RecvId id) override {
    const Key& key = recvs_.at(static_cast<size_t>(id));
    const Message& m = mail_.delivered.at(key);
    taken_.push_back(key);
    return {m.data(), m.size()};
  }
  bool sent() override { return true; }
  // Frees the messages taken since the last call (their program has suspended or ended).
  void release_taken() {
    for (const Key& key : taken_) mail_.delivered.erase(key);
    taken_.clear();
  }

 private:
  static Key make_key(int from, int to, const collectives::MsgKey& k) {
    return {from, to, static_cast<uint8_t>(k.tag), k.step, k.chunk, k.piece};
  }
  InprocHub& hub_;
  Mail& mail_;
  int self_;
  std::vector<Key> recvs_;
  std::vector<Key> taken_;  // taken, not yet released
};

InprocHub::InprocHub(int islands, Scheduler& scheduler) : scheduler_(scheduler) {
  const auto n = static_cast<size_t>(islands);
  for (int i = 0; i < islands; ++i) st_.members.push_back(i);
  st_.counters.resize(n);
  st_.waits.resize(n);
  st_.first_seq.resize(n);
  st_.next_seq.resize(n);
}

bool InprocHub::settled() const {
  return std::all_of(collectives_.begin(), collectives_.end(), [](const auto& e) { return e.second.done; });
}

InprocHub::Snapshot InprocHub::snapshot() const {
  TORCH_CHECK(settled(), "InprocHub::snapshot: a collective is in flight and not complete");
  std::ostringstream rng;
  rng << rng_;
  Snapshot s{st_, rng.str(), /*settled=*/{}};
  for (const auto& [id, c] : collectives_) {
    if (c.holders.empty()) continue;
    s.settled.push_back({/*key=*/id.first, /*seq=*/id.second, static_cast<uint8_t>(c.kind), c.root, c.ids, c.result,
                         /*start=*/c.start, /*done_at=*/c.done_at, {c.holders.begin(), c.holders.end()}});
  }
  return s;
}

void InprocHub::restore(const Snapshot& s) {
  TORCH_CHECK(quiescent() && s.counters.size() == st_.counters.size() && s.waits.size() == st_.waits.size() &&
                  s.first_seq.size() == st_.first_seq.size() && s.next_seq.size() == st_.next_seq.size(),
              "InprocHub::restore: a snapshot of another hub");
  st_ = s;  // its State part
  std::istringstream rng(s.rng);
  rng >> rng_;
  TORCH_CHECK(!rng.fail(), "InprocHub::restore: unreadable network RNG state");
  for (const Settled& p : s.settled) {
    TORCH_CHECK(p.kind <= static_cast<uint8_t>(Kind::kAllgather) && !p.holders.empty(),
                "InprocHub::restore: malformed collective in flight");
    Collective& c = collectives_[{p.key, p.seq}];
    c.kind = static_cast<Kind>(p.kind);
    c.root = p.root;
    c.ids = p.ids;
    c.done = true;
    c.result = p.result;
    c.start = p.start;
    c.done_at = p.done_at;
    for (const auto& [island, posted] : p.holders) {
      TORCH_CHECK(island >= 0 && island < size(), "InprocHub::restore: no island ", island);
      c.holders[island] = posted;
      restored_[island].push_back({{p.key, p.seq}, posted});
    }
    c.waiting = static_cast<int>(c.holders.size());
  }
}

void InprocHub::set_network(const NetworkModel* network, uint64_t seed, double detect_s) {
  network_ = network;
  rng_.seed(seed ^ 0x6e6574776f726bULL);
  detect_s_ = detect_s;
}

void InprocHub::complete(Collective& c, uint64_t seq) {
  // Members that posted before a failure was noticed were waiting for the dead island.
  if (c.start < st_.detected_at && c.contributions.size() > 0) c.start = st_.detected_at;
  c.done_at = c.start;
  phase_streams_ = c.streams;
  if (c.kind == Kind::kAllreduce) run_allreduce(c, seq);
  else run_exchange(c);
  phase_streams_ = 1;
  c.done = true;
}

void InprocHub::end_phase(double& clock) {
  if (!network_ || phase_.empty()) return;  // count() fills a phase only with a network
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
  WaitTime& w = st_.waits[static_cast<size_t>(self)];
  const double idle = std::max(0.0, std::min(start, ready_at) - std::max(now, posted));
  w.idle_s += idle;
  w.comm_s += ready_at - now - idle;
  scheduler_.advance(self, ready_at);
}

size_t InprocHub::participants(const Collective& c, uint32_t key, uint64_t seq) const {
  const std::vector<int> in = within(st_.members, c.ids);
  return static_cast<size_t>(std::count_if(in.begin(), in.end(), [&](int m) { return first_seq_of(key, m) <= seq; }));
}

uint64_t& InprocHub::next_seq_of(uint32_t key, int id) {
  if (key == 0) return st_.next_seq[static_cast<size_t>(id)];
  auto it = st_.sub_next_seq.find({key, id});
  if (it == st_.sub_next_seq.end()) {
    // First use on this island: from the first collective, or, for an island that joined a
    // running simulation, from the sub-group's next one.
    uint64_t next = 0;
    if (contains(st_.joiners, id)) {
      for (const auto& [k, v] : st_.sub_next_seq) {
        if (k.first == key) next = std::max(next, v);
      }
    }
    st_.sub_first_seq[{key, id}] = next;
    it = st_.sub_next_seq.emplace(std::make_pair(key, id), next).first;
  }
  return it->second;
}

uint64_t InprocHub::first_seq_of(uint32_t key, int id) const {
  if (key == 0) return st_.first_seq[static_cast<size_t>(id)];
  auto it = st_.sub_first_seq.find({key, id});
  return it == st_.sub_first_seq.end() ? 0 : it->second;
}

void InprocHub::add_member(int id, uint64_t first_seq) {
  TORCH_CHECK(id >= 0 && id < size(), "no island ", id);
  TORCH_CHECK(!contains(st_.members, id), "island ", id, " is already a member");
  st_.members.insert(std::upper_bound(st_.members.begin(), st_.members.end(), id), id);
  ++st_.epoch;
  st_.first_seq[static_cast<size_t>(id)] = first_seq;
  st_.next_seq[static_cast<size_t>(id)] = first_seq;
  // Its sub-groups start afresh from their next collective when it makes them again.
  st_.joiners.push_back(id);
  for (auto* m : {&st_.sub_next_seq, &st_.sub_first_seq}) {
    std::erase_if(*m, [id](const auto& e) { return e.first.second == id; });
  }
}

double InprocHub::hand_over(int from, int to, uint64_t bytes, double at) {
  st_.counters[static_cast<size_t>(from)].sent += bytes;
  st_.counters[static_cast<size_t>(from)].raw_sent += bytes;
  st_.counters[static_cast<size_t>(to)].received += bytes;
  if (!network_) return at;
  const double start = network_->connected_at(from, to, at);
  return start + network_->transfer_time({from, to, bytes}, rng_);
}

void InprocHub::remove_member(int id, double at, bool failure) {
  auto it = std::find(st_.members.begin(), st_.members.end(), id);
  if (it == st_.members.end()) return;
  st_.members.erase(it);
  ++st_.epoch;
  if (failure) st_.detected_at = std::max(st_.detected_at, at + detect_s_);
  // The server role hears of it when the survivors would (a round may close without it).
  if (server_) server_->on_member_lost(id, failure ? at + detect_s_ : at);
  for (auto cit = collectives_.begin(); cit != collectives_.end();) {
    Collective& c = cit->second;
    if (!c.done) {
      c.contributions.erase(id);
      if (c.contributions.empty()) {
        cit = collectives_.erase(cit);
        continue;
      }
      if (c.contributions.size() == participants(c, cit->first.first, cit->first.second)) {
        complete(c, cit->first.second);
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

void InprocHub::count(int from, int to, uint64_t size, uint64_t raw_bytes) {
  if (from >= 0) {
    st_.counters[static_cast<size_t>(from)].sent += size;
    st_.counters[static_cast<size_t>(from)].raw_sent += raw_bytes;
  }
  if (to >= 0) st_.counters[static_cast<size_t>(to)].received += size;
  // A shard's message shares its links with those of the S - 1 other shards, of about its size.
  if (network_ && (from >= 0 || to >= 0)) phase_.push_back({from, to, size * static_cast<uint64_t>(phase_streams_)});
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
  count(from, to, frame.size(), static_cast<uint64_t>(raw_numel) * sizeof(float));
  Status st = codec.decode(frame.data(), frame.size(), dst);
  TORCH_CHECK(st.is_ok(), "in-process transfer failed to decode its own encoding: ", st.to_string());
}

template <typename MakeProgram>
void InprocHub::run_programs(const std::vector<int>& ids, const MakeProgram& make, double& clock) {
  InprocWire::Mail mail;
  std::vector<std::unique_ptr<InprocWire>> wires;
  std::vector<collectives::Program> programs;
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    wires.push_back(std::make_unique<InprocWire>(*this, mail, ids[pos]));
    programs.push_back(make(*wires.back(), static_cast<int>(pos)));
  }
  for (;;) {
    bool all_done = true;
    for (size_t i = 0; i < programs.size(); ++i) {
      if (!programs[i].done() && wires[i]->can_resume()) {
        programs[i].resume();
        wires[i]->release_taken();
      }
      all_done = all_done && programs[i].done();
    }
    const bool moved = !mail.pending.empty();
    uint64_t held = 0;
    for (const auto& [key, msg] : mail.pending) held += msg.size();
    for (const auto& [key, msg] : mail.delivered) held += msg.size();
    peak_message_bytes_ = std::max(peak_message_bytes_, held);
    end_phase(clock);
    for (auto& [key, msg] : mail.pending) mail.delivered.emplace(key, std::move(msg));
    mail.pending.clear();
    if (all_done) return;
    TORCH_CHECK(moved, "in-process collective stalled: a schedule waits for a message nobody sent");
  }
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
  run_programs(
      ids,
      [&](collectives::Wire& wire, int pos) {
        const Contribution& part = *parts[static_cast<size_t>(pos)];
        return collectives::allreduce(wire, {seq, ids, pos, /*buffer=*/part.buffer, /*out=*/{},
                                             /*transmitted=*/part.transmitted, parts[0]->codec, divisor});
      },
      c.done_at);
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

void InprocHub::run_exchange(Collective& c) {
  std::vector<int> ids;
  std::vector<uint64_t> sizes;  // allgather
  for (auto& [id, part] : c.contributions) {
    ids.push_back(id);
    sizes.push_back(part.bytes.size());
  }
  const bool broadcast = c.kind == Kind::kBroadcast;
  TORCH_CHECK(!broadcast || c.contributions.count(c.root) > 0, "broadcast root ", c.root, " is not a member");
  run_programs(
      ids,
      [&](collectives::Wire& wire, int pos) {
        Contribution& part = c.contributions.at(ids[static_cast<size_t>(pos)]);
        return broadcast ? collectives::broadcast(wire, {ids, c.root, part.buffer, c.contributions.at(c.root).codec})
                         : collectives::allgather(wire, {ids, pos, &part.bytes, sizes, part.gathered});
      },
      c.done_at);
  c.result = {Status::ok(), ids, static_cast<double>(ids.size())};
}

}  // namespace atl::transport
