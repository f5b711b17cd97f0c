#include "transport/gloo/control_store.h"

namespace atl::transport::gloo_mesh {

ControlStore::ControlStore(ControlPlane& control, std::string prefix, uint64_t epoch,
                           const std::atomic<bool>& stop, std::chrono::milliseconds wait)
    : control_(control), prefix_(std::move(prefix)), epoch_(epoch), stop_(stop), wait_(wait) {}

void ControlStore::set(const std::string& key, const std::vector<char>& data) {
  Status st = control_.store_set(prefix_ + key, std::vector<uint8_t>(data.begin(), data.end()));
  if (!st.is_ok()) throw RendezvousError("store_set '" + prefix_ + key + "': " + st.to_string());
}

void ControlStore::wait(const std::vector<std::string>& keys) {
  for (const auto& k : keys) get(k);
}

void ControlStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) { wait(keys); }

std::vector<char> ControlStore::get(const std::string& key) {
  auto it = fetched_.find(key);
  if (it != fetched_.end()) return it->second;
  for (;;) {
    if (stop_) throw RendezvousError("the group is stopping");
    const uint64_t now_epoch = control_.membership().epoch;
    if (now_epoch != epoch_) {
      throw RendezvousError("membership moved from epoch " + std::to_string(epoch_) + " to " +
                            std::to_string(now_epoch) + " while waiting for '" + prefix_ + key + "'");
    }
    StatusOr<std::vector<uint8_t>> v = control_.store_get(prefix_ + key, Clock::now() + wait_);
    if (v.is_ok()) {
      const std::vector<uint8_t>& bytes = v.value();
      return fetched_[key] = std::vector<char>(bytes.begin(), bytes.end());
    }
    if (v.status().code() != StatusCode::kTimeout) {
      throw RendezvousError("store_get '" + prefix_ + key + "': " + v.status().to_string());
    }
  }
}

}  // namespace atl::transport::gloo_mesh
