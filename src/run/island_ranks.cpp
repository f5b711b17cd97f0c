#include "src/run/island_ranks.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <optional>
#include <utility>

#include "src/base/bytes.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/run/shard_plane.h"
#include "transport/shards.h"

namespace atl::run {

namespace {

c10d::ProcessGroupGloo& pg(const std::shared_ptr<c10d::ProcessGroupGloo>& g) { return *g; }

// c10d keeps its objects in intrusive pointers; this class holds one reference in a
// shared_ptr whose deleter drops it (so that the header needs no c10d).
template <class T>
std::shared_ptr<T> hold(c10::intrusive_ptr<T> p) {
  T* raw = p.release();
  return std::shared_ptr<T>(raw, [](T* q) { c10::intrusive_ptr<T>::reclaim(q); });
}

}  // namespace

StatusOr<std::unique_ptr<IslandRanks>> IslandRanks::connect(const RankPlace& place,
                                                            std::chrono::milliseconds join_timeout,
                                                            std::chrono::milliseconds op_timeout) {
  std::unique_ptr<IslandRanks> ranks(new IslandRanks(place));
  const std::string where = "island " + std::to_string(place.island) + " rank " + std::to_string(place.rank) +
                            " of " + std::to_string(place.ranks) + ": ";
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(place.port);
    so.isServer = place.rank == 0;
    so.numWorkers = static_cast<size_t>(place.ranks);
    so.waitWorkers = true;
    so.timeout = join_timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(place.rank0_host, so);
    auto options = c10d::ProcessGroupGloo::Options::create(op_timeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(place.bind_host));
    options->threads = 1;
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, place.rank, place.ranks, options);
    ranks->store_ = hold(c10::intrusive_ptr<c10d::Store>(std::move(store)));
    ranks->group_ = hold(std::move(group));
  } catch (const std::exception& e) {
    return Status(StatusCode::kTimeout, where + "the island's ranks did not meet at " + place.rank0_host + ":" +
                                            std::to_string(place.port) + ": " + e.what());
  }
  return ranks;
}

IslandRanks::~IslandRanks() = default;

// A c10d operation that failed (another rank of the island is gone: a closed connection, or
// the operation timeout) ends this rank's part in the run with one line that says so.
template <class Op>
void IslandRanks::c10d(const char* what, Op&& op) {
  try {
    op();
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (const size_t nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
    throw StatusError("island " + std::to_string(place_.island) + " rank " + std::to_string(rank()),
                      Status(StatusCode::kPeerLost, std::string(what) + " among the island's " +
                                                        std::to_string(ranks()) + " ranks failed (a rank is gone?): " + why));
  }
}

double IslandRanks::average(at::Tensor& grads, double loss) {
  at::Tensor l = at::full({1}, loss, at::kDouble);
  std::vector<at::Tensor> g{grads}, ls{l};
  c10d("the gradient all-reduce", [&] {
    pg(group_).allreduce(g)->wait();
    pg(group_).allreduce(ls)->wait();
  });
  grads.div_(ranks());
  return l.item<double>() / ranks();
}

void IslandRanks::broadcast(at::Tensor& t, int root) {
  std::vector<at::Tensor> v{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  c10d(root == 0 ? "a broadcast from rank 0" : "a broadcast of a shard", [&] { pg(group_).broadcast(v, o)->wait(); });
}

std::vector<uint8_t> IslandRanks::broadcast_bytes(std::vector<uint8_t> bytes, int root) {
  const bool mine = rank() == root;
  at::Tensor n = at::full({1}, static_cast<int64_t>(mine ? bytes.size() : 0), at::kLong);
  broadcast(n, root);
  const int64_t size = n.item<int64_t>();
  at::Tensor t = mine ? at::from_blob(bytes.data(), {size}, at::kByte).clone() : at::empty({size}, at::kByte);
  if (size > 0) broadcast(t, root);
  const auto* p = t.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + size);
}

uint64_t IslandRanks::broadcast_count(uint64_t v, int root) {
  at::Tensor t = at::full({1}, static_cast<int64_t>(v), at::kLong);
  broadcast(t, root);
  return static_cast<uint64_t>(t.item<int64_t>());
}

bool IslandRanks::all(bool v) {
  std::vector<at::Tensor> t{at::full({1}, v ? 1 : 0, at::kLong)};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MIN;
  c10d("an agreement", [&] { pg(group_).allreduce(t, o)->wait(); });
  return t[0].item<int64_t>() != 0;
}

void IslandRanks::sum(at::Tensor& t) {
  std::vector<at::Tensor> v{t};
  c10d("a sum", [&] { pg(group_).allreduce(v)->wait(); });
}

double IslandRanks::broadcast_double(double v) {
  at::Tensor t = at::full({1}, v, at::kDouble);
  broadcast(t);
  return t.item<double>();
}

bool IslandRanks::broadcast_flag(bool v) {
  at::Tensor t = at::full({1}, v ? 1 : 0, at::kByte);
  broadcast(t);
  return t.item<uint8_t>() != 0;
}

Status IslandRanks::check_replica(const at::Tensor& params) {
  const at::Tensor p = params.detach().cpu().contiguous();
  const auto mine = static_cast<int64_t>(xxh64(p.data_ptr(), p.nbytes()));
  at::Tensor t = at::full({1}, mine, at::kLong);
  broadcast(t);
  // Every rank learns whether any differs, rank 0 included (its island then fails the run).
  at::Tensor differ = at::full({1}, t.item<int64_t>() == mine ? 0 : 1, at::kLong);
  std::vector<at::Tensor> v{differ};
  c10d("the replica check", [&] { pg(group_).allreduce(v)->wait(); });
  const int64_t n = differ.item<int64_t>();
  if (n == 0) return Status::ok();
  return Status(StatusCode::kInternal, "island " + std::to_string(place_.island) + ": " + std::to_string(n) + " of its " +
                                           std::to_string(ranks()) + " ranks hold parameters that differ from rank 0's "
                                           "after the last step (the ranks diverged)");
}

void put_shard_seqs(const RankShard::Seqs& seqs, std::map<uint32_t, uint64_t>& keyed) {
  const int ranks = static_cast<int>(seqs.group.size());
  for (int r = 1; r < ranks; ++r) {
    keyed[transport::shard_key(r, ranks)] = seqs.group[static_cast<size_t>(r)];
    for (const auto& [sub, by_rank] : seqs.subs) keyed[transport::shard_key(r, ranks, sub)] = by_rank[static_cast<size_t>(r)];
  }
}

RankShard::Seqs take_shard_seqs(std::map<uint32_t, uint64_t>& keyed, int ranks) {
  RankShard::Seqs seqs;
  seqs.group.assign(static_cast<size_t>(ranks), 0);
  for (auto at = keyed.begin(); at != keyed.end();) {
    const uint32_t key = at->first;
    const int r = static_cast<int>(key & 0xFFu);
    const uint32_t sub = (key >> 16) & 0xFFu;
    if (transport::shard_streams(key) != ranks || r < 1 || r >= ranks) {
      ++at;
      continue;
    }
    if (sub == 0) {
      seqs.group[static_cast<size_t>(r)] = at->second;
    } else {
      std::vector<uint64_t>& by_rank = seqs.subs[sub];
      by_rank.resize(static_cast<size_t>(ranks), 0);
      by_rank[static_cast<size_t>(r)] = at->second;
    }
    at = keyed.erase(at);
  }
  return seqs;
}

std::map<uint32_t, uint64_t> first_seqs(const RankShard::Seqs& seqs, int rank) {
  std::map<uint32_t, uint64_t> out;
  const int ranks = static_cast<int>(seqs.group.size());
  for (const auto& [sub, by_rank] : seqs.subs) out[transport::shard_key(rank, ranks, sub)] = by_rank[static_cast<size_t>(rank)];
  return out;
}

IslandStart broadcast_start(IslandRanks& ranks, IslandStart start) {
  std::vector<uint8_t> bytes;
  if (ranks.leads()) {
    bytes.push_back(start.kind);
    bytes.insert(bytes.end(), start.payload.begin(), start.payload.end());
  }
  bytes = ranks.broadcast_bytes(std::move(bytes));
  IslandStart got;
  if (bytes.empty() || bytes[0] > IslandStart::kNothing) throw std::runtime_error("island ranks: malformed start message");
  got.kind = static_cast<IslandStart::Kind>(bytes[0]);
  got.payload.assign(bytes.begin() + 1, bytes.end());
  return got;
}

namespace {

// A collective's result as rank 0 saw it, for the other ranks.
std::vector<uint8_t> encode_result(const transport::CollectiveResult& r) {
  bytes::ByteWriter w;
  w.u8(static_cast<uint8_t>(r.status.code()));
  w.str(r.status.message());
  w.u64(r.contributors.size());
  for (int c : r.contributors) w.i64(c);
  w.f64(r.weight_sum);
  std::string s = std::move(w).bytes();
  return {s.begin(), s.end()};
}

transport::CollectiveResult decode_result(const std::vector<uint8_t>& b) {
  const std::string s(b.begin(), b.end());
  bytes::Reader r(s, "collective result");
  transport::CollectiveResult out;
  const uint8_t code = r.u8();
  std::string message = r.str();
  out.status = Status(static_cast<StatusCode>(code), std::move(message));
  const uint64_t n = r.u64();
  for (uint64_t i = 0; i < n && r.ok(); ++i) out.contributors.push_back(static_cast<int>(r.i64()));
  out.weight_sum = r.f64();
  if (!r.done()) throw std::runtime_error("island ranks: malformed collective result");
  return out;
}

// One collective of the island's algorithm on every rank. Rank 0 waits for the real one
// (`inner`), then hands its completion, its result and the buffers it filled to the others.
class MirroredHandle final : public transport::Handle {
 public:
  // `outputs`: the tensors the collective fills (the buffer, `transmitted`); `gathered`:
  // allgather's output vectors.
  MirroredHandle(IslandRanks& ranks, std::unique_ptr<transport::Handle> inner, std::vector<at::Tensor> outputs,
                 std::vector<std::vector<uint8_t>>* gathered = nullptr)
      : ranks_(ranks), inner_(std::move(inner)), outputs_(std::move(outputs)), gathered_(gathered) {}

  bool done() const override {
    if (result_) return true;
    return ranks_.broadcast_flag(inner_ ? inner_->done() : false);
  }

  transport::CollectiveResult wait(transport::Deadline deadline) override {
    if (result_) return *result_;
    std::vector<uint8_t> bytes;
    if (inner_) bytes = encode_result(inner_->wait(deadline));
    transport::CollectiveResult r = decode_result(ranks_.broadcast_bytes(std::move(bytes)));
    if (r.status.code() == StatusCode::kTimeout) return r;  // it may still complete
    for (at::Tensor& t : outputs_)
      if (t.defined()) ranks_.broadcast(t);
    if (gathered_) share_gathered();
    result_ = r;
    return r;
  }

 private:
  void share_gathered() {
    bytes::ByteWriter w;
    if (ranks_.leads()) {
      w.u64(gathered_->size());
      for (const auto& g : *gathered_) w.str(std::string(g.begin(), g.end()));
    }
    std::string s = std::move(w).bytes();
    const std::vector<uint8_t> got = ranks_.broadcast_bytes({s.begin(), s.end()});
    const std::string text(got.begin(), got.end());
    bytes::Reader r(text, "allgather result");
    std::vector<std::vector<uint8_t>> out(r.u64());
    for (auto& g : out) {
      const std::string one = r.str();
      g.assign(one.begin(), one.end());
    }
    if (!r.done()) throw std::runtime_error("island ranks: malformed allgather result");
    *gathered_ = std::move(out);
  }

  IslandRanks& ranks_;
  std::unique_ptr<transport::Handle> inner_;
  std::vector<at::Tensor> outputs_;
  std::vector<std::vector<uint8_t>>* gathered_;
  std::optional<transport::CollectiveResult> result_;
};

// What one sharded exchange moves: this rank's shard, posted (again, for a rerun) on its
// shard group, and at the end every rank's shard handed to every rank.
class ShardWork {
 public:
  virtual ~ShardWork() = default;
  virtual std::unique_ptr<transport::Handle> post(transport::Group& group) = 0;
  virtual void share(IslandRanks& ranks) = 0;
  virtual void release() {}
};

// An all-reduce: shard r of the buffer (and of `transmitted`), kept as it was given for a
// rerun; at the end each rank's shard broadcast from it.
class AllreduceWork final : public ShardWork {
 public:
  AllreduceWork(int rank, std::vector<transport::ShardRange> ranges, at::Tensor buffer, at::Tensor transmitted,
                const compression::Pipeline& codec, double weight)
      : rank_(rank), ranges_(std::move(ranges)), buffer_(std::move(buffer)), transmitted_(std::move(transmitted)),
        codec_(codec), weight_(weight), input_(slice(buffer_).clone()) {}
  std::unique_ptr<transport::Handle> post(transport::Group& group) override {
    slice(buffer_).copy_(input_);  // a rerun starts from the input
    return group.allreduce_mean(slice(buffer_), codec_, weight_, transmitted_.defined() ? slice(transmitted_) : at::Tensor());
  }
  void share(IslandRanks& ranks) override {
    for (int r = 0; r < ranks.ranks(); ++r) {
      const transport::ShardRange& range = ranges_[static_cast<size_t>(r)];
      for (at::Tensor* t : {&buffer_, &transmitted_}) {
        if (!t->defined()) continue;
        at::Tensor part = t->narrow(0, range.begin, range.size);
        ranks.broadcast(part, r);
      }
    }
  }
  void release() override { input_ = at::Tensor(); }

 private:
  at::Tensor slice(const at::Tensor& t) const {
    const transport::ShardRange& r = ranges_[static_cast<size_t>(rank_)];
    return t.narrow(0, r.begin, r.size);
  }
  const int rank_;
  const std::vector<transport::ShardRange> ranges_;
  at::Tensor buffer_, transmitted_;
  const compression::Pipeline& codec_;
  const double weight_;
  at::Tensor input_;
};

// An allgather of a message in parts (Group::allgather_parts): part r gathered on rank r's
// shard group; at the end each rank's gathered part broadcast from it.
class GatherWork final : public ShardWork {
 public:
  GatherWork(int rank, std::vector<std::vector<uint8_t>> parts, std::vector<std::vector<std::vector<uint8_t>>>* out)
      : rank_(rank), parts_(std::move(parts)), out_(out) {
    out_->assign(parts_.size(), {});
  }
  std::unique_ptr<transport::Handle> post(transport::Group& group) override {
    mine_.clear();
    return group.allgather(parts_[static_cast<size_t>(rank_)], &mine_);
  }
  void share(IslandRanks& ranks) override {
    for (int r = 0; r < ranks.ranks(); ++r) {
      bytes::ByteWriter w;
      if (r == rank_) {
        w.u64(mine_.size());
        for (const auto& g : mine_) w.str(std::string(g.begin(), g.end()));
      }
      std::string s = std::move(w).bytes();
      const std::vector<uint8_t> got = ranks.broadcast_bytes({s.begin(), s.end()}, r);
      const std::string text(got.begin(), got.end());
      bytes::Reader in(text, "allgather part");
      std::vector<std::vector<uint8_t>>& part = (*out_)[static_cast<size_t>(r)];
      part.assign(in.u64(), {});
      for (auto& g : part) {
        const std::string one = in.str();
        g.assign(one.begin(), one.end());
      }
      if (!in.done()) throw std::runtime_error("island ranks: malformed allgather part");
    }
  }
  void release() override {
    parts_.clear();
    mine_.clear();
  }

 private:
  const int rank_;
  std::vector<std::vector<uint8_t>> parts_;
  std::vector<std::vector<std::vector<uint8_t>>>* out_;
  std::vector<std::vector<uint8_t>> mine_;
};

// One sharded exchange (islands.shard_exchange) on every rank: each rank posts its shard on
// its shard group, while the ranks agree at every poll on whether all shards are done. Then
// each rank's result goes to every rank, and all take the same decision
// (transport::agree_shards): the shards that ended with other contributors than the rest run
// again from their input; then each shard goes to every rank. (Rank 0's membership reaches
// the shard planes on its own: src/run/shard_plane.h.)
class ShardedHandle final : public transport::Handle {
 public:
  // `group`: this rank's shard group (of the island's group or of a sub-group); `seqs` its
  // shards' next sequence numbers, by rank.
  ShardedHandle(IslandRanks& ranks, RankShard& shard, transport::Group& group, std::vector<uint64_t>& seqs, int island,
                std::unique_ptr<ShardWork> work)
      : ranks_(ranks), shard_(shard), group_(group), seqs_(seqs), island_(island), work_(std::move(work)) {
    exchange_ = ++shard_.exchanges;
    seqs_.resize(static_cast<size_t>(ranks_.ranks()), 0);
    for (int r = 0; r < ranks_.ranks(); ++r)  // every rank posts its own now
      if (r != ranks_.rank()) ++seqs_[static_cast<size_t>(r)];
    catch_up();
    post();
  }

  bool done() const override {
    if (result_) return true;
    return ranks_.all(local_ || mine_->done());
  }

  transport::CollectiveResult wait(transport::Deadline deadline) override {
    if (result_) return *result_;
    struct Blocked {  // the whole wait, whichever way it ends
      RankShard& shard;
      const transport::Clock::time_point t0 = transport::Clock::now();
      ~Blocked() {
        if (shard.blocked) shard.blocked(std::chrono::duration<double>(transport::Clock::now() - t0).count());
      }
    } blocked{shard_};
    if (!wait_all(deadline)) {
      transport::CollectiveResult late;
      late.status = Status(StatusCode::kTimeout, "the sharded exchange did not complete before the deadline");
      return late;
    }
    std::vector<transport::CollectiveResult> results = exchange_results();
    for (int round = 0;; ++round) {
      transport::ShardAgreement a = transport::agree_shards(results);
      if (round == 0 && exchange_ == shard_fault().rerun_exchange && a.status.is_ok() && a.rerun.empty() &&
          shard_fault().rerun_shard < ranks_.ranks())
        a.rerun = {shard_fault().rerun_shard};  // ATOLL_SHARD_FAULT
      if (!a.status.is_ok()) return finish(results[0], a.status);
      if (a.rerun.empty()) break;
      if (round == transport::max_shard_reruns(results[0].contributors.size()))
        return finish(results[0], Status(StatusCode::kInternal, "the shards of the outer exchange did not agree on "
                                                                "its contributors after running again"));
      ATOLL_WARN("island " << island_ << " rank " << ranks_.rank() << ": the exchange's shards ended with different "
                           << "contributors; shards " << transport::ids_text(a.rerun) << " run again");
      for (int r : a.rerun)
        if (r != ranks_.rank()) ++seqs_[static_cast<size_t>(r)];  // posted there
      catch_up();
      if (std::find(a.rerun.begin(), a.rerun.end(), ranks_.rank()) != a.rerun.end()) post();
      wait_all(std::nullopt);
      results = exchange_results();
    }
    work_->share(ranks_);
    count_bytes();
    return finish(results[0], Status::ok());
  }

 private:
  // On every rank: the shard planes start their collectives in rank 0's membership epoch or
  // a later one (their views reach them on their own, and could lag).
  void catch_up() {
    const uint64_t epoch = ranks_.broadcast_count(ranks_.leads() ? shard_.epoch() : 0);
    if (!ranks_.leads()) shard_.catch_up(epoch);
  }
  // This rank's shard, on its shard group. No c10d call: in a rerun only some ranks post.
  void post() {
    local_.reset();
    ++seqs_[static_cast<size_t>(ranks_.rank())];
    mine_ = work_->post(group_);
  }
  // Until every rank's shard has ended, or (rank 0's clock) the deadline has passed.
  bool wait_all(transport::Deadline deadline) {
    for (;;) {
      if (!local_) {
        const auto poll = transport::Clock::now() + std::chrono::milliseconds(100);
        transport::CollectiveResult r = mine_->wait(deadline ? std::min(*deadline, poll) : poll);
        if (r.status.code() != StatusCode::kTimeout) local_ = std::move(r);
      }
      if (ranks_.all(local_.has_value())) return true;
      if (ranks_.broadcast_flag(deadline && transport::Clock::now() >= *deadline)) return false;
    }
  }
  // Every rank's result, by rank.
  std::vector<transport::CollectiveResult> exchange_results() {
    std::vector<transport::CollectiveResult> results;
    for (int r = 0; r < ranks_.ranks(); ++r)
      results.push_back(
          decode_result(ranks_.broadcast_bytes(r == ranks_.rank() ? encode_result(*local_) : std::vector<uint8_t>{}, r)));
    return results;
  }
  transport::CollectiveResult finish(transport::CollectiveResult r, Status st) {
    if (!st.is_ok()) r.status = std::move(st);
    work_->release();
    result_ = r;
    return r;
  }
  // The other ranks' shard planes' counters, for rank 0's records.
  void count_bytes() {
    transport::ByteCounters mine = ranks_.leads() ? transport::ByteCounters{} : shard_.bytes();
    at::Tensor t = at::tensor({static_cast<int64_t>(mine.sent), static_cast<int64_t>(mine.received),
                               static_cast<int64_t>(mine.raw_sent)}, at::kLong);
    ranks_.sum(t);
    const auto* v = t.data_ptr<int64_t>();
    shard_.others = {static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1]), static_cast<uint64_t>(v[2])};
  }

  IslandRanks& ranks_;
  RankShard& shard_;
  transport::Group& group_;
  std::vector<uint64_t>& seqs_;
  const int island_;
  int64_t exchange_ = 0;  // this one's number among the island's sharded exchanges (from 1)
  std::unique_ptr<ShardWork> work_;
  std::unique_ptr<transport::Handle> mine_;
  std::optional<transport::CollectiveResult> local_;
  std::optional<transport::CollectiveResult> result_;
};

class MirroredGroup final : public transport::Group {
 public:
  // With `shard`: the island's group sharded (shard_group and seqs null: shard->group's), or
  // one of its sub-groups (`shard_group` this rank's shard of it, `seqs` its shards').
  MirroredGroup(IslandRanks& ranks, transport::Group* inner, std::unique_ptr<transport::Group> owned, int island,
                RankShard* shard = nullptr, std::unique_ptr<transport::Group> shard_group = nullptr,
                std::vector<uint64_t>* seqs = nullptr)
      : ranks_(ranks), inner_(inner), owned_(std::move(owned)), island_(island), shard_(shard),
        shard_group_(std::move(shard_group)), seqs_(seqs) {
    if (shard_ && !shard_group_) seqs_ = &shard_->seqs.group;
  }

  transport::MembershipView view() const override {
    bytes::ByteWriter w;
    if (inner_) {
      const transport::MembershipView v = inner_->view();
      w.u64(v.epoch);
      w.u64(v.members.size());
      for (int m : v.members) w.i64(m);
    }
    std::string s = std::move(w).bytes();
    const std::vector<uint8_t> got = ranks_.broadcast_bytes({s.begin(), s.end()});
    const std::string text(got.begin(), got.end());
    bytes::Reader r(text, "membership view");
    transport::MembershipView v;
    v.epoch = r.u64();
    v.members.resize(r.u64());
    for (int& m : v.members) m = static_cast<int>(r.i64());
    if (!r.done()) throw std::runtime_error("island ranks: malformed membership view");
    v.self = island_;
    return v;
  }

  std::unique_ptr<transport::Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                                    double weight, at::Tensor transmitted) override {
    std::vector<transport::ShardRange> ranges = shard_ ? transport::shard_ranges(buffer.numel(), ranks_.ranks())
                                                       : std::vector<transport::ShardRange>{};
    if (ranges.empty())
      return mirror(inner_ ? inner_->allreduce_mean(buffer, codec, weight, transmitted) : nullptr, {buffer, transmitted});
    return std::make_unique<ShardedHandle>(
        ranks_, *shard_, shard_group(), *seqs_, island_,
        std::make_unique<AllreduceWork>(ranks_.rank(), std::move(ranges), std::move(buffer), std::move(transmitted), codec, weight));
  }
  std::unique_ptr<transport::Handle> broadcast(int root, at::Tensor buffer,
                                               const compression::Pipeline& codec) override {
    return mirror(inner_ ? inner_->broadcast(root, buffer, codec) : nullptr, {buffer});
  }
  std::unique_ptr<transport::Handle> allgather(std::vector<uint8_t> bytes,
                                               std::vector<std::vector<uint8_t>>* out) override {
    auto inner = inner_ ? inner_->allgather(std::move(bytes), out) : nullptr;
    return std::make_unique<MirroredHandle>(ranks_, std::move(inner), std::vector<at::Tensor>{}, out);
  }
  int shards() const override { return shard_ ? ranks_.ranks() : 1; }
  std::unique_ptr<transport::Handle> allgather_parts(std::vector<std::vector<uint8_t>> parts,
                                                     std::vector<std::vector<std::vector<uint8_t>>>* out) override {
    if (!shard_ || parts.size() == 1) return Group::allgather_parts(std::move(parts), out);
    if (parts.size() != static_cast<size_t>(ranks_.ranks()))
      throw std::logic_error("allgather_parts: " + std::to_string(parts.size()) + " parts for " +
                             std::to_string(ranks_.ranks()) + " ranks");
    return std::make_unique<ShardedHandle>(ranks_, *shard_, shard_group(), *seqs_, island_,
                                           std::make_unique<GatherWork>(ranks_.rank(), std::move(parts), out));
  }
  // Sharded alike when the island's group is and `key` may be (transport::sharded_subgroup):
  // rank r's shard on its shard group's sub-group shard_key(r, R, key).
  std::unique_ptr<transport::Group> subgroup(uint32_t key, std::vector<int> ids) override {
    const bool sharded = shard_ && !shard_group_ && transport::sharded_subgroup(key);
    std::unique_ptr<transport::Group> mine =
        sharded ? shard_->subgroup(transport::shard_key(ranks_.rank(), ranks_.ranks(), key), ids) : nullptr;
    std::unique_ptr<transport::Group> sub = inner_ ? inner_->subgroup(key, std::move(ids)) : nullptr;
    transport::Group* raw = sub.get();
    if (!sharded) return std::make_unique<MirroredGroup>(ranks_, raw, std::move(sub), island_);
    std::vector<uint64_t>& seqs = shard_->seqs.subs[key];
    seqs.resize(static_cast<size_t>(ranks_.ranks()), 0);
    return std::make_unique<MirroredGroup>(ranks_, raw, std::move(sub), island_, shard_, std::move(mine), &seqs);
  }
  std::unique_ptr<transport::Handle> push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec,
                                          double weight, at::Tensor transmitted) override {
    return mirror(inner_ ? inner_->push(tag, buffer, codec, weight, transmitted) : nullptr, {transmitted});
  }
  std::unique_ptr<transport::Handle> pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec) override {
    return mirror(inner_ ? inner_->pull(tag, out, codec) : nullptr, {out});
  }
  // Rank 0's own count (records only; the others send nothing).
  transport::ByteCounters bytes() const override { return inner_ ? inner_->bytes() : transport::ByteCounters{}; }
  std::unique_ptr<transport::Handle> resume_in_flight() override {
    std::unique_ptr<transport::Handle> h = inner_ ? inner_->resume_in_flight() : nullptr;
    if (!ranks_.broadcast_flag(h != nullptr)) return nullptr;
    return std::make_unique<MirroredHandle>(ranks_, std::move(h), std::vector<at::Tensor>{});
  }

 private:
  std::unique_ptr<transport::Handle> mirror(std::unique_ptr<transport::Handle> inner, std::vector<at::Tensor> outputs) {
    return std::make_unique<MirroredHandle>(ranks_, std::move(inner), std::move(outputs));
  }

  transport::Group& shard_group() { return shard_group_ ? *shard_group_ : *shard_->group; }

  IslandRanks& ranks_;
  transport::Group* inner_;                  // null on ranks > 0
  std::unique_ptr<transport::Group> owned_;  // a sub-group's
  const int island_;
  RankShard* shard_;                         // islands.shard_exchange
  std::unique_ptr<transport::Group> shard_group_;  // a sharded sub-group's: this rank's shard of it
  std::vector<uint64_t>* seqs_ = nullptr;          // its shards' next sequence numbers, by rank
};

class MirroredTime final : public algorithms::TimeSource {
 public:
  MirroredTime(IslandRanks& ranks, algorithms::TimeSource* inner) : ranks_(ranks), inner_(inner) {}
  double now_s() const override { return ranks_.broadcast_double(ranks_.leads() ? inner_->now_s() : 0.0); }
  // Rank 0 idles; the others meet it at its next broadcast.
  void sleep_until_s(double t) override {
    if (ranks_.leads()) inner_->sleep_until_s(t);
  }

 private:
  IslandRanks& ranks_;
  algorithms::TimeSource* inner_;
};

}  // namespace

namespace {

class RankOuterShards final : public algorithms::OuterShards {
 public:
  explicit RankOuterShards(IslandRanks& ranks) : ranks_(ranks) {}
  int rank() const override { return ranks_.rank(); }
  int ranks() const override { return ranks_.ranks(); }
  void share(at::Tensor& t, const std::vector<transport::ShardRange>& ranges) override {
    const bool host = t.is_cpu();
    at::Tensor all = host ? t : t.cpu();
    for (size_t r = 0; r < ranges.size(); ++r) {
      at::Tensor part = all.narrow(0, ranges[r].begin, ranges[r].size);
      ranks_.broadcast(part, static_cast<int>(r));
    }
    if (!host) t.copy_(all);
  }

 private:
  IslandRanks& ranks_;
};

}  // namespace

std::unique_ptr<algorithms::OuterShards> rank_outer_shards(IslandRanks& ranks) {
  return std::make_unique<RankOuterShards>(ranks);
}

void log_outer_state(const algorithms::OuterShards& shards, const std::string& who) {
  ATOLL_INFO(who << ": holds " << shards.values_held() << " of the island's " << shards.values_whole()
                 << " outer optimizer state values");
}

std::unique_ptr<transport::Group> mirrored_group(IslandRanks& ranks, transport::Group* inner, int island,
                                                 RankShard* shard) {
  return std::make_unique<MirroredGroup>(ranks, ranks.leads() ? inner : nullptr, nullptr, island, shard);
}

std::unique_ptr<algorithms::TimeSource> mirrored_time(IslandRanks& ranks, algorithms::TimeSource* inner) {
  return std::make_unique<MirroredTime>(ranks, inner);
}

}  // namespace atl::run
