#include "transport/zmq/star_reducer.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "compression/frame.h"
#include "src/base/log.h"
#include "transport/collectives/attempt.h"
#include "transport/group.h"
#include "transport/star.h"

namespace atl::transport {

bool StarReducer::expected(int id, uint64_t seq) const {
  auto it = first_seq_.find(id);
  return contains(members_, id) && (it == first_seq_.end() || it->second <= seq);
}

void StarReducer::on_push(int id, uint64_t tag, std::span<const uint8_t> frame, double weight,
                          const std::vector<int>& members) {
  members_ = members;
  const uint64_t seq = star::tag_seq(tag);
  switch (star::tag_kind(tag)) {
    case star::TagKind::kData:
      contribute(id, seq, frame, weight);
      break;
    case star::TagKind::kFirstSeq:
      first_seq_[id] = seq;
      for (auto& [s, c] : collectives_) {
        if (s >= seq || c.done) continue;
        c.first.erase(id);
        c.contributions.erase(id);
      }
      break;
    default:
      return;  // not a push tag: ignored
  }
  on_membership(members);
}

void StarReducer::contribute(int id, uint64_t seq, std::span<const uint8_t> frame, double weight) {
  if (finished_.count(seq) || !expected(id, seq)) return;  // too late, or not its collective
  auto [it, opened] = collectives_.try_emplace(seq);
  Collective& c = it->second;
  if (opened) {
    for (int m : members_) {
      if (expected(m, seq)) c.first.insert(m);
    }
  }
  if (c.done || c.contributions.count(id) || !c.failure.is_ok()) return;  // a duplicate
  compression::FrameView view;
  if (Status st = compression::parse_frame(frame.data(), frame.size(), &view); !st.is_ok()) {
    return fail(c, id, weight, corrupt("island " + std::to_string(id) + "'s contribution: " + st.message()));
  }
  const int64_t n = static_cast<int64_t>(view.header.elements);
  if (n > max_elements_) {
    return fail(c, id, weight,
                Status(StatusCode::kInternal, "island " + std::to_string(id) + " contributed " + std::to_string(n) +
                                                  " values, above the coordinator's max_push_elements"));
  }
  if (c.numel >= 0 && n != c.numel) {
    return fail(c, id, weight,
                Status(StatusCode::kInternal, "island " + std::to_string(id) + " contributed " + std::to_string(n) +
                                                  " values, others " + std::to_string(c.numel) +
                                                  ": members issued different collectives"));
  }
  at::Tensor values = at::empty({n}, at::kFloat);
  if (Status st = pipeline_.decode(frame.data(), frame.size(), values); !st.is_ok()) {
    return fail(c, id, weight, corrupt("island " + std::to_string(id) + "'s contribution did not decode with " +
                                       pipeline_.describe() + ": " + st.message()));
  }
  c.numel = n;
  c.contributions[id] = {weight, std::move(values)};
}

void StarReducer::fail(Collective& c, int id, double weight, Status why) {
  ATOLL_WARN("coordinator: star all-reduce failed: " << why.message());
  c.failure = std::move(why);
  c.contributions.clear();
  c.contributions[id] = {weight, at::Tensor()};  // only its id and weight go in the result
}

void StarReducer::forget(int id) {
  first_seq_.erase(id);
  fetched_.erase(id);
  for (auto& [seq, c] : collectives_) {
    if (!c.done && c.failure.is_ok()) c.contributions.erase(id);
  }
}

void StarReducer::on_membership(const std::vector<int>& members) {
  members_ = members;
  for (auto& [seq, c] : collectives_) try_complete(seq, c);
  release_fetched();
}

void StarReducer::try_complete(uint64_t seq, Collective& c) {
  if (c.done || c.contributions.empty()) return;
  if (c.failure.is_ok()) {
    for (int m : members_) {
      if (expected(m, seq) && !c.contributions.count(m)) return;  // still waiting for m
    }
  }
  complete(seq, c);
}

void StarReducer::complete(uint64_t seq, Collective& c) {
  collectives::ResultInfo info;
  std::vector<at::Tensor> values;
  std::vector<double> weights;
  for (auto& [id, part] : c.contributions) {
    info.contributors.push_back(id);
    info.weight_sum += part.weight;
    values.push_back(part.values);
    weights.push_back(part.weight);
  }
  info.numel = static_cast<uint64_t>(std::max<int64_t>(0, c.numel));
  info.status = c.failure.code();
  if (c.failure.is_ok()) {
    for (int m : c.first) {
      if (!c.contributions.count(m)) info.status = StatusCode::kPeerLost;
    }
  }
  c.reply = collectives::encode_result_info(info);
  c.info_bytes = c.reply.size();
  if (c.failure.is_ok() && values.size() > 1) {
    pipeline_.encode(star::mean(values, weights), c.reply, star::mean_seed(seq));
  }
  c.contributors = std::move(info.contributors);
  c.contributions.clear();
  c.done = true;
  finished_.insert(seq);
  while (finished_.size() > kFinishedMemory) finished_.erase(finished_.begin());
}

// A result is dropped once every island that may still ask for it (its contributors and the
// members it waited for, while they take part) has asked for a later one: an island runs its
// star all-reduces in order, so it is done with this one.
void StarReducer::release_fetched() {
  size_t kept = 0;
  for (const auto& [seq, c] : collectives_) kept += c.done;
  for (auto it = collectives_.begin(); it != collectives_.end();) {
    const Collective& c = it->second;
    bool release = c.done && kept > kMaxKept;
    if (c.done && !release) {
      auto done_with = [&](int id) {
        auto f = fetched_.find(id);
        return !contains(members_, id) || (f != fetched_.end() && f->second > it->first);
      };
      release = std::all_of(c.contributors.begin(), c.contributors.end(), done_with) &&
                std::all_of(c.first.begin(), c.first.end(), done_with);
    }
    if (release) {
      --kept;
      it = collectives_.erase(it);
    } else {
      ++it;
    }
  }
}

std::span<const uint8_t> StarReducer::gone(int id, StatusCode status) {
  collectives::ResultInfo info;
  info.status = status;
  info.weight_sum = 1;
  info.contributors = {id};
  scratch_reply_ = collectives::encode_result_info(info);
  return scratch_reply_;
}

std::optional<std::span<const uint8_t>> StarReducer::on_pull(int id, uint64_t tag) {
  const uint64_t seq = star::tag_seq(tag);
  const star::TagKind kind = star::tag_kind(tag);
  if (kind != star::TagKind::kData && kind != star::TagKind::kInfo) return gone(id, StatusCode::kInvalidArgument);
  uint64_t& asked = fetched_[id];
  asked = std::max(asked, seq);
  auto it = collectives_.find(seq);
  if (it == collectives_.end() || !it->second.done) {
    // Finished and no longer kept, or never this island's: it keeps its own buffer.
    if (finished_.count(seq) || !expected(id, seq)) return gone(id, StatusCode::kMembershipChanged);
    return std::nullopt;
  }
  const Collective& c = it->second;
  if (kind == star::TagKind::kInfo) return std::span<const uint8_t>(c.reply.data(), c.info_bytes);
  return std::span<const uint8_t>(c.reply);
}

size_t StarReducer::running() const {
  size_t n = 0;
  for (const auto& [seq, c] : collectives_) n += !c.done;
  return n;
}

}  // namespace atl::transport
