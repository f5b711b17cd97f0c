#include "src/run/handover.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include "src/base/bytes.h"
#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/core/json.h"
#include "src/core/tensor_codec.h"

namespace atl::run {

using transport::Clock;

namespace {

constexpr char kBlobMagic[4] = {'A', 'T', 'H', 'B'};
constexpr char kIndexMagic[4] = {'A', 'T', 'H', 'I'};
constexpr uint32_t kVersion = 4;  // the blob's (3: tensors as core/tensor_codec.h; 4: named state); the index's is kIndexVersion
constexpr uint32_t kIndexVersion = 1;
constexpr size_t kPartBytes = size_t{16} << 20;  // below the store's 64 MiB value limit

// Appends `magic`: the first four bytes of the blob and of the index.
void put_magic(bytes::ByteWriter& w, const char (&magic)[4]) { w.raw(magic, 4); }
bool has_magic(bytes::Reader& r, const char (&magic)[4]) {
  const uint8_t* at = r.take(4, "magic");
  return at && std::memcmp(at, magic, 4) == 0;
}

std::vector<uint8_t> to_vector(bytes::ByteWriter&& w) {
  const std::string s = std::move(w).bytes();
  return {s.begin(), s.end()};
}

std::string index_key(int joiner) { return "atoll/handover/" + std::to_string(joiner); }
std::string part_key(int joiner, uint64_t epoch, int64_t step, uint32_t i) {
  return index_key(joiner) + "/e" + std::to_string(epoch) + "s" + std::to_string(step) + "/" + std::to_string(i);
}

// The index key's value: where the parts are and what they add up to.
struct Index {
  int32_t donor = -1;
  uint64_t epoch = 0;
  int64_t step = 0;
  uint32_t parts = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // XXH64 (seed 0) of the concatenated parts
};

std::vector<uint8_t> encode_index(const Index& x) {
  bytes::ByteWriter w;
  put_magic(w, kIndexMagic);
  w.u32(kIndexVersion);
  w.i32(x.donor);
  w.u64(x.epoch);
  w.i64(x.step);
  w.u32(x.parts);
  w.u64(x.bytes);
  w.u64(x.checksum);
  return to_vector(std::move(w));
}

bool decode_index(const std::vector<uint8_t>& v, Index* x) {
  bytes::Reader r(v.data(), v.size(), "hand-over index");
  if (!has_magic(r, kIndexMagic) || r.u32("version") != kIndexVersion) return false;
  x->donor = r.i32("donor");
  x->epoch = r.u64("epoch");
  x->step = r.i64("step");
  x->parts = r.u32("parts");
  x->bytes = r.u64("bytes");
  x->checksum = r.u64("checksum");
  return r.done();
}

bool takes_part(const transport::Membership& m, int id) {
  for (const auto& p : m.members) {
    if (p.id == id) return transport::in_collectives(p);
  }
  return false;
}

}  // namespace

std::vector<uint8_t> encode_handover(const Handover& h) {
  bytes::ByteWriter w;
  put_magic(w, kBlobMagic);
  w.u32(kVersion);
  w.i32(h.donor);
  w.u64(h.epoch);
  w.i64(h.step);
  w.u64(h.first_seq);
  TORCH_CHECK(h.global.defined() && h.global.scalar_type() == at::kFloat && h.global.dim() == 1,
              "hand-over: the global model must be a [N] float32 tensor");
  core::put_tensor(w, h.global);
  core::put_named_state(w, h.state);
  w.u32(static_cast<uint32_t>(h.subgroup_seqs.size()));
  for (const auto& [key, seq] : h.subgroup_seqs) {
    w.u32(key);
    w.u64(seq);
  }
  return to_vector(std::move(w));
}

Status decode_handover(const uint8_t* data, size_t size, Handover* h) {
  bytes::Reader r(data, size, "hand-over");
  auto bad = [&](const std::string& why) { return corrupt("hand-over: " + (r.ok() ? why : r.error())); };
  if (!has_magic(r, kBlobMagic)) return bad("bad magic");
  const uint32_t version = r.u32("version");
  if (!r.ok()) return bad("");
  if (version != kVersion) return bad("unsupported version " + std::to_string(version));
  h->donor = r.i32("donor");
  h->epoch = r.u64("epoch");
  h->step = r.i64("step");
  h->first_seq = r.u64("first_seq");
  h->global = core::get_tensor(r);
  if (!r.ok()) return bad("");
  if (!h->global.defined() || h->global.scalar_type() != at::kFloat || h->global.dim() != 1) {
    return bad("the global model is not a [N] float32 tensor");
  }
  core::get_named_state(r, h->state);
  const uint32_t subgroups = r.u32("sub-group count");
  if (!r.ok()) return bad("");
  if (subgroups > r.remaining() / 12) return bad("bad sub-group count");
  h->subgroup_seqs.clear();
  for (uint32_t i = 0; i < subgroups; ++i) {
    const uint32_t key = r.u32("sub-group key");
    const uint64_t seq = r.u64("sub-group seq");
    if (!r.ok()) return bad("");
    if (key == 0 || (!h->subgroup_seqs.empty() && key <= h->subgroup_seqs.rbegin()->first)) {
      return bad("sub-group keys not ascending and > 0");
    }
    h->subgroup_seqs[key] = seq;
  }
  if (r.remaining() != 0) return bad(std::to_string(r.remaining()) + " trailing bytes");
  return Status::ok();
}

Status publish_handover(transport::ControlPlane& control, int joiner, const Handover& h) {
  const std::vector<uint8_t> blob = encode_handover(h);
  Index x;
  x.donor = h.donor;
  x.epoch = h.epoch;
  x.step = h.step;
  x.bytes = blob.size();
  x.checksum = xxh64(blob.data(), blob.size());
  x.parts = static_cast<uint32_t>((blob.size() + kPartBytes - 1) / kPartBytes);
  for (uint32_t i = 0; i < x.parts; ++i) {
    const size_t begin = i * kPartBytes, end = std::min(blob.size(), begin + kPartBytes);
    ATOLL_TRY(control.store_set(part_key(joiner, x.epoch, x.step, i),
                                std::vector<uint8_t>(blob.begin() + begin, blob.begin() + end)));
  }
  return control.store_set(index_key(joiner), encode_index(x));  // last: the parts are there
}

StatusOr<Handover> fetch_handover(transport::ControlPlane& control, int joiner, uint64_t min_epoch,
                                  Clock::time_point deadline, const std::function<Status()>& give_up) {
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return Status(StatusCode::kTimeout, "no state hand-over before the deadline");
    auto index = control.store_get(index_key(joiner), std::min(deadline, now + std::chrono::seconds(1)));
    Index x;
    if (index.is_ok() && decode_index(index.value(), &x) && x.epoch >= min_epoch &&
        takes_part(control.membership(), x.donor)) {
      std::vector<uint8_t> blob;
      Status st = Status::ok();
      for (uint32_t i = 0; i < x.parts && st.is_ok(); ++i) {
        auto part = control.store_get(part_key(joiner, x.epoch, x.step, i), deadline);
        st = part.status();
        if (st.is_ok()) blob.insert(blob.end(), part.value().begin(), part.value().end());
      }
      if (st.is_ok() && (blob.size() != x.bytes || xxh64(blob.data(), blob.size()) != x.checksum)) {
        st = corrupt("checksum mismatch");
      }
      Handover h;
      if (st.is_ok()) st = decode_handover(blob.data(), blob.size(), &h);
      if (st.is_ok()) {
        for (uint32_t i = 0; i < x.parts; ++i) (void)control.store_set(part_key(joiner, x.epoch, x.step, i), {});
        return h;
      }
      // A newer hand-over may have replaced this one while it was read: ask again.
      ATOLL_WARN("island " << joiner << ": hand-over of epoch " << x.epoch << " step " << x.step
                           << " rejected: " << st.message() << "; waiting for another");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } else if (index.is_ok()) {
      // An older hand-over (meant for an earlier process with this id), or one whose donor
      // has left since: wait for a new one.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } else if (index.status().code() != StatusCode::kTimeout) {
      return index.status();
    }
    ATOLL_TRY(give_up());
  }
}

HandoverDonor::HandoverDonor(transport::ControlPlane& control, std::function<Handover()> make,
                             std::function<void(const std::string&)> record, std::function<Status()> healthy,
                             core::Roles roles)
    : control_(control), make_(std::move(make)), record_(std::move(record)), healthy_(std::move(healthy)),
      roles_(std::move(roles)) {}

// The joiners whose donor this island is, among the members in collectives, and that it has
// not served in this epoch.
std::vector<int> HandoverDonor::joiners(const transport::Membership& m) const {
  const int self = control_.self();
  std::vector<int> running;
  for (const auto& p : m.members)
    if (transport::in_collectives(p)) running.push_back(p.id);
  std::sort(running.begin(), running.end());
  std::vector<int> joiners;
  for (const auto& p : m.members) {
    if (transport::in_collectives(p) || p.id == self || roles_.donor(p.id, running) != self) continue;
    auto served = served_.find(p.id);
    if (served == served_.end() || served->second != m.epoch) joiners.push_back(p.id);
  }
  return joiners;
}

void HandoverDonor::at_step_boundary() {
  transport::Membership m = control_.membership();
  const int self = control_.self();
  const std::vector<int> joiners = this->joiners(m);
  if (joiners.empty()) return;
  const auto t0 = Clock::now();
  Handover h = make_();
  h.epoch = m.epoch;
  std::vector<int> published, waiting;
  for (int j : joiners) {
    if (Status st = publish_handover(control_, j, h); !st.is_ok()) {
      ATOLL_WARN("island " << self << ": cannot hand the state over to island " << j << ": " << st.to_string());
      continue;
    }
    served_[j] = m.epoch;
    published.push_back(j);
    waiting.push_back(j);
    ATOLL_INFO("island " << self << ": handed the state at step " << h.step << " (round " << core::handover_round(h)
                         << ", collective #" << h.first_seq << ") to island " << j);
  }
  // The joiners take part from collective #first_seq on: wait until they do, so that this
  // island's next collective includes them (or until they are gone).
  Status health = Status::ok();
  auto next_log = t0 + std::chrono::seconds(10);
  for (;;) {
    std::erase_if(waiting, [&](int j) {
      const bool member = std::any_of(m.members.begin(), m.members.end(), [j](const auto& p) { return p.id == j; });
      return !member || takes_part(m, j);
    });
    if (waiting.empty()) break;
    if (health = healthy_(); !health.is_ok()) break;
    if (Clock::now() >= next_log) {
      ATOLL_INFO("island " << self << ": still waiting for " << waiting.size() << " island(s) to take the state");
      next_log += std::chrono::seconds(10);
    }
    m = control_.wait_for_change(m.epoch, Clock::now() + std::chrono::milliseconds(200));
  }
  auto joined = [&](int j) { return std::find(waiting.begin(), waiting.end(), j) == waiting.end(); };
  for (int j : published) {
    if (joined(j)) served_.erase(j);
    record_(core::JsonObject()
                .add("event", "handover")
                .add("island", self)
                .add("joiner", j)
                .add("step", h.step)
                .add("round", core::handover_round(h))
                .add("first_seq", h.first_seq)
                .add("epoch", h.epoch)
                .add("joined", takes_part(m, j))
                .add("wait_s", std::chrono::duration<double>(Clock::now() - t0).count())
                .str());
  }
}

}  // namespace atl::run
