#include "src/run/handover.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/core/json.h"

namespace atl::run {

static_assert(std::endian::native == std::endian::little, "the hand-over is written little-endian");

using transport::Clock;

namespace {

constexpr char kBlobMagic[4] = {'A', 'T', 'H', 'B'};
constexpr char kIndexMagic[4] = {'A', 'T', 'H', 'I'};
constexpr uint32_t kVersion = 2;  // the blob's; the index's is kIndexVersion
constexpr uint32_t kIndexVersion = 1;
constexpr size_t kPartBytes = size_t{16} << 20;  // below the store's 64 MiB value limit
constexpr int kMaxDims = 8;

// Frozen dtype ids of the blob.
constexpr std::pair<uint8_t, at::ScalarType> kDtypes[] = {
    {1, at::kFloat}, {2, at::kDouble}, {3, at::kLong}, {4, at::kInt}, {5, at::kBFloat16}, {6, at::kHalf}};

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

std::vector<uint8_t> with_magic(const char (&magic)[4]) {
  std::vector<uint8_t> out(4);
  std::memcpy(out.data(), magic, 4);
  return out;
}

// Reads little-endian values from a byte range; every read is bounds-checked.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  template <typename T>
  bool get(T* v) {
    if (left_ < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    left_ -= sizeof(T);
    return true;
  }
  const uint8_t* take(size_t n) {
    if (left_ < n) return nullptr;
    const uint8_t* at = p_;
    p_ += n;
    left_ -= n;
    return at;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

void put_tensor(std::vector<uint8_t>& out, const at::Tensor& t) {
  put<uint8_t>(out, t.defined() ? 1 : 0);
  if (!t.defined()) return;
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  uint8_t id = 0;
  for (const auto& [wire, type] : kDtypes) {
    if (type == c.scalar_type()) id = wire;
  }
  TORCH_CHECK(id != 0, "hand-over: tensors of dtype ", c.scalar_type(), " are not supported");
  TORCH_CHECK(c.dim() <= kMaxDims, "hand-over: tensors have at most ", kMaxDims, " dimensions");
  put<uint8_t>(out, id);
  put<uint8_t>(out, static_cast<uint8_t>(c.dim()));
  for (int64_t d : c.sizes()) put<int64_t>(out, d);
  const size_t at = out.size();
  out.resize(at + c.nbytes());
  if (c.nbytes() > 0) std::memcpy(out.data() + at, c.data_ptr(), c.nbytes());
}

Status get_tensor(Reader& r, at::Tensor* t) {
  uint8_t defined = 0, id = 0, ndim = 0;
  if (!r.get(&defined) || defined > 1) return corrupt("hand-over: bad tensor flag");
  if (!defined) {
    *t = at::Tensor();
    return Status::ok();
  }
  if (!r.get(&id) || !r.get(&ndim)) return corrupt("hand-over: truncated tensor header");
  std::optional<at::ScalarType> type;
  for (const auto& [wire, st] : kDtypes) {
    if (wire == id) type = st;
  }
  if (!type) return corrupt("hand-over: unknown dtype id " + std::to_string(id));
  if (ndim > kMaxDims) return corrupt("hand-over: " + std::to_string(ndim) + " dimensions");
  std::vector<int64_t> sizes(ndim);
  uint64_t numel = 1;
  const uint64_t limit = r.left();
  for (int64_t& d : sizes) {
    if (!r.get(&d) || d < 0) return corrupt("hand-over: bad tensor size");
    if (d > 0 && numel > limit / static_cast<uint64_t>(d)) return corrupt("hand-over: tensor larger than the blob");
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t nbytes = numel * c10::elementSize(*type);
  const uint8_t* bytes = nbytes <= limit ? r.take(nbytes) : nullptr;
  if (bytes == nullptr) return corrupt("hand-over: truncated tensor values");
  *t = at::empty(sizes, at::TensorOptions().dtype(*type));
  std::memcpy(t->data_ptr(), bytes, nbytes);
  return Status::ok();
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
  std::vector<uint8_t> out = with_magic(kIndexMagic);
  put(out, kIndexVersion);
  put(out, x.donor);
  put(out, x.epoch);
  put(out, x.step);
  put(out, x.parts);
  put(out, x.bytes);
  put(out, x.checksum);
  return out;
}

bool decode_index(const std::vector<uint8_t>& v, Index* x) {
  Reader r(v.data(), v.size());
  const uint8_t* magic = r.take(4);
  uint32_t version = 0;
  return magic && std::memcmp(magic, kIndexMagic, 4) == 0 && r.get(&version) && version == kIndexVersion &&
         r.get(&x->donor) && r.get(&x->epoch) && r.get(&x->step) && r.get(&x->parts) && r.get(&x->bytes) && r.get(&x->checksum) &&
         r.left() == 0;
}

bool takes_part(const transport::Membership& m, int id) {
  for (const auto& p : m.members) {
    if (p.id == id) return transport::in_collectives(p);
  }
  return false;
}

}  // namespace

std::vector<uint8_t> encode_handover(const Handover& h) {
  std::vector<uint8_t> out = with_magic(kBlobMagic);
  put(out, kVersion);
  put<int32_t>(out, h.donor);
  put(out, h.epoch);
  put(out, h.step);
  put(out, h.first_seq);
  put(out, h.state.rounds);
  put(out, static_cast<uint32_t>(1 + h.state.tensors.size()));
  TORCH_CHECK(h.global.defined() && h.global.scalar_type() == at::kFloat && h.global.dim() == 1,
              "hand-over: the global model must be a [N] float32 tensor");
  put_tensor(out, h.global);
  for (const at::Tensor& t : h.state.tensors) put_tensor(out, t);
  put(out, static_cast<uint32_t>(h.subgroup_seqs.size()));
  for (const auto& [key, seq] : h.subgroup_seqs) {
    put(out, key);
    put(out, seq);
  }
  return out;
}

Status decode_handover(const uint8_t* data, size_t size, Handover* h) {
  Reader r(data, size);
  const uint8_t* magic = r.take(4);
  if (!magic || std::memcmp(magic, kBlobMagic, 4) != 0) return corrupt("hand-over: bad magic");
  uint32_t version = 0, count = 0;
  int32_t donor = -1;
  if (!r.get(&version)) return corrupt("hand-over: truncated header");
  if (version != kVersion) return corrupt("hand-over: unsupported version " + std::to_string(version));
  if (!r.get(&donor) || !r.get(&h->epoch) || !r.get(&h->step) || !r.get(&h->first_seq) ||
      !r.get(&h->state.rounds) || !r.get(&count)) {
    return corrupt("hand-over: truncated header");
  }
  if (count < 1 || count > r.left()) return corrupt("hand-over: bad tensor count " + std::to_string(count));
  h->donor = donor;
  ATOLL_TRY(get_tensor(r, &h->global));
  if (!h->global.defined() || h->global.scalar_type() != at::kFloat || h->global.dim() != 1) {
    return corrupt("hand-over: the global model is not a [N] float32 tensor");
  }
  h->state.tensors.assign(count - 1, at::Tensor());
  for (at::Tensor& t : h->state.tensors) ATOLL_TRY(get_tensor(r, &t));
  uint32_t subgroups = 0;
  if (!r.get(&subgroups) || subgroups > r.left() / 12) return corrupt("hand-over: bad sub-group count");
  h->subgroup_seqs.clear();
  for (uint32_t i = 0; i < subgroups; ++i) {
    uint32_t key = 0;
    uint64_t seq = 0;
    if (!r.get(&key) || !r.get(&seq)) return corrupt("hand-over: truncated sub-groups");
    if (key == 0 || (!h->subgroup_seqs.empty() && key <= h->subgroup_seqs.rbegin()->first)) {
      return corrupt("hand-over: sub-group keys not ascending and > 0");
    }
    h->subgroup_seqs[key] = seq;
  }
  if (r.left() != 0) return corrupt("hand-over: " + std::to_string(r.left()) + " trailing bytes");
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
                             std::function<bool(int, int)> holds)
    : control_(control), make_(std::move(make)), record_(std::move(record)), healthy_(std::move(healthy)),
      holds_(std::move(holds)) {}

void HandoverDonor::at_step_boundary() {
  transport::Membership m = control_.membership();
  const int self = control_.self();
  // The joiners whose donor this island is: the lowest-id member in collectives that holds
  // their state.
  auto donor_of = [&](int joiner) {
    for (const auto& p : m.members) {
      if (transport::in_collectives(p) && (!holds_ || holds_(p.id, joiner))) return p.id;
    }
    return -1;
  };
  std::vector<int> joiners;
  for (const auto& p : m.members) {
    if (transport::in_collectives(p) || p.id == self || donor_of(p.id) != self) continue;
    auto served = served_.find(p.id);
    if (served == served_.end() || served->second != m.epoch) joiners.push_back(p.id);
  }
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
    ATOLL_INFO("island " << self << ": handed the state at step " << h.step << " (round " << h.state.rounds
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
                .add("round", h.state.rounds)
                .add("first_seq", h.first_seq)
                .add("epoch", h.epoch)
                .add("joined", takes_part(m, j))
                .add("wait_s", std::chrono::duration<double>(Clock::now() - t0).count())
                .str());
  }
}

}  // namespace atl::run
