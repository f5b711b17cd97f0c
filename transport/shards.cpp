#include "transport/shards.h"

#include <ATen/ATen.h>

#include <algorithm>
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

namespace {

class AllHandles final : public Handle {
 public:
  explicit AllHandles(std::vector<std::unique_ptr<Handle>> handles) : handles_(std::move(handles)) {}
  bool done() const override {
    return std::all_of(handles_.begin(), handles_.end(), [](const auto& h) { return h->done(); });
  }
  CollectiveResult wait(Deadline deadline) override {
    std::vector<CollectiveResult> results;
    for (auto& h : handles_) {
      results.push_back(h->wait(deadline));
      if (results.back().status.code() == StatusCode::kTimeout) return results.back();
    }
    for (const CollectiveResult& r : results) {
      if (!r.status.is_ok() && r.status.code() != StatusCode::kPeerLost) return r;
      if (r.contributors != results.front().contributors) {
        CollectiveResult bad = r;
        bad.status = Status(StatusCode::kInternal,
                            "the shards of a sharded exchange ended with different contributors (" +
                                ids_text(results.front().contributors) + " against " + ids_text(r.contributors) +
                                "): a member failed between them");
        return bad;
      }
    }
    return results.front();
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

  MembershipView view() const override { return parent_->view(); }

  std::unique_ptr<Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec, double weight,
                                         at::Tensor transmitted) override {
    const std::vector<ShardRange> ranges = shard_ranges(buffer.numel(), shards_);
    if (ranges.empty()) return parent_->allreduce_mean(buffer, codec, weight, transmitted);
    std::vector<std::unique_ptr<Handle>> handles;
    for (int s = 0; s < shards_; ++s) {
      const ShardRange& r = ranges[static_cast<size_t>(s)];
      Group& g = *subs_[static_cast<size_t>(s)];
      handles.push_back(g.allreduce_mean(buffer.narrow(0, r.begin, r.size), codec, weight,
                                         transmitted.defined() ? transmitted.narrow(0, r.begin, r.size) : at::Tensor()));
    }
    return all_handles(std::move(handles));
  }
  std::unique_ptr<Handle> broadcast(int root, at::Tensor buffer, const compression::Pipeline& codec) override {
    return parent_->broadcast(root, std::move(buffer), codec);
  }
  std::unique_ptr<Handle> allgather(std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out) override {
    return parent_->allgather(std::move(bytes), out);
  }
  std::unique_ptr<Group> subgroup(uint32_t key, std::vector<int> ids) override {
    TORCH_CHECK(key < kShardKeyBase, "subgroup: keys from ", kShardKeyBase, " on carry the exchange's shards");
    return parent_->subgroup(key, std::move(ids));
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
    return all_handles(std::move(handles));
  }

 private:
  std::unique_ptr<Group> parent_;
  const int shards_;
  std::vector<std::unique_ptr<Group>> subs_;  // shard s on subs_[s]
};

}  // namespace

std::unique_ptr<Handle> all_handles(std::vector<std::unique_ptr<Handle>> handles) {
  return std::make_unique<AllHandles>(std::move(handles));
}

std::unique_ptr<Group> sharded_group(std::unique_ptr<Group> parent, int shards, std::vector<int> ids) {
  if (shards <= 1) return parent;
  return std::make_unique<ShardedGroup>(std::move(parent), shards, std::move(ids));
}

}  // namespace atl::transport
