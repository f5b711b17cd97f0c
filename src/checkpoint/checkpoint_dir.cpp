#include "src/checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace atl::checkpoint {
namespace {

// "step-000000000100.ckpt" -> 100; -1 for any other name.
int64_t step_of(const std::string& name) {
  const std::string prefix = "step-", suffix = ".ckpt";
  if (name.size() != prefix.size() + 12 + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < prefix.size() + 12; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(std::max(1, keep)) {}

std::string CheckpointDir::file_name(int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%012" PRId64 ".ckpt", step);
  return name;
}

std::vector<Entry> CheckpointDir::list() const {
  std::vector<Entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const int64_t step = step_of(name);
    if (step >= 0) out.push_back({step, it->path().string()});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return out;
}

Status CheckpointDir::save(int64_t step, const std::vector<Section>& sections) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return {StatusCode::kUnavailable, "cannot create checkpoint directory '" + dir_ + "': " + ec.message()};
  Status s = write_checkpoint((fs::path(dir_) / file_name(step)).string(), sections);
  if (!s.is_ok()) return s;
  // Leftovers of writers killed mid-write, then the checkpoints beyond `keep`.
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(".step-", 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
  std::vector<Entry> all = list();
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) {
    std::error_code ignored;
    fs::remove(all[i].path, ignored);
  }
  return Status::ok();
}

StatusOr<Loaded> CheckpointDir::load_latest(const std::function<void(const std::string&)>& refused) const {
  const std::vector<Entry> all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    StatusOr<Checkpoint> c = read_checkpoint(it->path);
    if (c.is_ok()) return Loaded{it->step, it->path, std::move(*c)};
    if (refused) {
      const bool more = std::next(it) != all.rend();
      refused(c.status().message() + (more ? "; falling back to the previous checkpoint" : "; no older checkpoint"));
    }
  }
  return not_found("no usable checkpoint in '" + dir_ + "'");
}

}  // namespace atl::checkpoint
