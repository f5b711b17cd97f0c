#include "transport/shards.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iterator>
#include <utility>

namespace atl::transport {

std::vector<ShardRange> shard_ranges(int64_t n, int shards) {
  if (shards <= 1 || n < static_cast<int64_t>(shards) * kShardAlign) return {};
  const int64_t blocks = (n + kShardAlign - 1) / kShardAlign;
  std::vector<ShardRange> out;
  int64_t at = 0;
  for (int s = 0; s < shards; ++s) {
    // Blocks dealt as evenly as possible, the first shards taking one more.
    const int64_t take = blocks / shards + (s < blocks % shards ? 1 : 0);
    const int64_t end = std::min(n, at + take * kShardAlign);
    out.push_back({at, end - at});
    at = end;
  }
  return out;
}

ShardAgreement agree_shards(const std::vector<CollectiveResult>& results) {
  ShardAgreement a;
  std::vector<int> common;
  for (size_t s = 0; s < results.size(); ++s) {
    const CollectiveResult& r = results[s];
    if (!r.status.is_ok() && r.status.code() != StatusCode::kPeerLost) {
      a.status = r.status;
      return a;
    }
    if (s == 0) {
      common = r.contributors;
      continue;
    }
    std::vector<int> both;
    std::set_intersection(common.begin(), common.end(), r.contributors.begin(), r.contributors.end(),
                          std::back_inserter(both));
    common = std::move(both);
  }
  for (size_t s = 0; s < results.size(); ++s)
    if (results[s].contributors != common) a.rerun.push_back(static_cast<int>(s));
  return a;
}

namespace {

// One all-reduce of the simulator's sharded group: its S shards' handles. Every island posts
// all its shards in one turn of the scheduler, and the hub completes a collective when its
// last member posts, so a member lost between the shards cannot happen here: the shards always
// agree (checked: agree_shards).
class ShardedHandle final : public Handle {
 public:
  explicit ShardedHandle(std::vector<std::unique_ptr<Handle>> handles) : handles_(std::move(handles)) {}
  bool done() const override {
    return std::all_of(handles_.begin(), handles_.end(), [](const auto& h) { return h->done(); });
  }
  CollectiveResult wait(Deadline deadline) override {
    std::vector<CollectiveResult> results;
    for (auto& h : handles_) {
      results.push_back(h->wait(deadline));
      if (results.back().status.code() == StatusCode::kTimeout) return results.back();
    }
    const ShardAgreement a = agree_shards(results);
    CollectiveResult r = results.front();
    if (!a.status.is_ok()) r.status = a.status;
    else if (!a.rerun.empty())
      r.status = Status(StatusCode::kInternal, "the shards of an exchange ended with different contributors");
    return r;
  }

 private:
  std::vector<std::unique_ptr<Handle>> handles_;
};

class ShardedGroup final : public Group {
 public:
  ShardedGroup(std::unique_ptr<Group> parent, int shards, std::vector<int> ids)
      : parent_(std::move(parent)), shards_(shards) {
    for (int s = 0; s < shards; ++s) subs_.push_back(parent_->subgroup(shard_key(s, shards), ids));
  }
  // A sharded sub-group: `parent` the whole sub-group, `subs` its shards.
  ShardedGroup(std::unique_ptr<Group> parent, std::vector<std::unique_ptr<Group>> subs)
      : parent_(std::move(parent)), shards_(static_cast<int>(subs.size())), subs_(std::move(subs)), nested_(true) {}

  MembershipView view() const override { return parent_->view(); }

  std::unique_ptr<Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec, double weight,
                                         at::Tensor transmitted) override {
    const std::vector<ShardRange> ranges = shard_ranges(buffer.numel(), shards_);
    if (ranges.empty()) return parent_->allreduce_mean(buffer, codec, weight, transmitted);
    std::vector<std::unique_ptr<Handle>> handles;
    for (size_t s = 0; s < subs_.size(); ++s) {
      const ShardRange& r = ranges[s];
      handles.push_back(subs_[s]->allreduce_mean(buffer.narrow(0, r.begin, r.size), codec, weight,
                                                 transmitted.defined() ? transmitted.narrow(0, r.begin, r.size)
                                                                       : at::Tensor()));
    }
    return std::make_unique<ShardedHandle>(std::move(handles));
  }
  std::unique_ptr<Handle> broadcast(int root, at::Tensor buffer, const compression::Pipeline& codec) override {
    return parent_->broadcast(root, std::move(buffer), codec);
  }
  std::unique_ptr<Handle> allgather(std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out) override {
    return parent_->allgather(std::move(bytes), out);
  }
  int shards() const override { return shards_; }
  std::unique_ptr<Handle> allgather_parts(std::vector<std::vector<uint8_t>> parts,
                                          std::vector<std::vector<std::vector<uint8_t>>>* out) override {
    if (parts.size() == 1) return Group::allgather_parts(std::move(parts), out);
    TORCH_CHECK(parts.size() == subs_.size(), "allgather_parts: ", parts.size(), " parts for ", subs_.size(), " shards");
    out->assign(parts.size(), {});
    std::vector<std::unique_ptr<Handle>> handles;
    for (size_t s = 0; s < subs_.size(); ++s) handles.push_back(subs_[s]->allgather(std::move(parts[s]), &(*out)[s]));
    return std::make_unique<ShardedHandle>(std::move(handles));
  }
  std::unique_ptr<Group> subgroup(uint32_t key, std::vector<int> ids) override {
    TORCH_CHECK(key < kShardKeyBase, "subgroup: keys from ", kShardKeyBase, " on carry the exchange's shards");
    if (nested_ || !sharded_subgroup(key)) return parent_->subgroup(key, std::move(ids));
    std::vector<std::unique_ptr<Group>> subs;
    for (int s = 0; s < shards_; ++s) subs.push_back(parent_->subgroup(shard_key(s, shards_, key), ids));
    return std::make_unique<ShardedGroup>(parent_->subgroup(key, std::move(ids)), std::move(subs));
  }
  std::unique_ptr<Handle> push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec, double weight,
                               at::Tensor transmitted) override {
    return parent_->push(tag, std::move(buffer), codec, weight, std::move(transmitted));
  }
  std::unique_ptr<Handle> pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec) override {
    return parent_->pull(tag, std::move(out), codec);
  }
  ByteCounters bytes() const override { return parent_->bytes(); }  // sub-groups count in it
  std::unique_ptr<Handle> resume_in_flight() override {
    if (auto h = parent_->resume_in_flight()) return h;  // an all-reduce too small to shard
    std::vector<std::unique_ptr<Handle>> handles;
    for (auto& sub : subs_)
      if (auto h = sub->resume_in_flight()) handles.push_back(std::move(h));
    if (handles.empty()) return nullptr;
    return std::make_unique<ShardedHandle>(std::move(handles));
  }

 private:
  std::unique_ptr<Group> parent_;
  const int shards_;
  std::vector<std::unique_ptr<Group>> subs_;  // shard s on subs_[s]
  const bool nested_ = false;                 // a sub-group's: its own sub-groups stay whole
};

}  // namespace

std::unique_ptr<Group> sharded_group(std::unique_ptr<Group> parent, int shards, std::vector<int> ids) {
  if (shards <= 1) return parent;
  return std::make_unique<ShardedGroup>(std::move(parent), shards, std::move(ids));
}

}  // namespace atl::transport
