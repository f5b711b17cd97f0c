#include "src/core/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/base/status.h"

namespace fs = std::filesystem;

namespace atl::core {

std::string config_hash(const config::Config& config) {
  static const std::map<std::string, std::string> defaults =
      config::flatten_yaml(config::to_yaml(config::Config{}, config::YamlKeys::kAll));
  std::string yaml;
  for (const auto& [key, value] : config::flatten_yaml(config::to_yaml(config, config::YamlKeys::kAll))) {
    const auto d = defaults.find(key);
    if (d == defaults.end() || d->second != value) yaml += key + ": " + value + "\n";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, static_cast<uint64_t>(xxh64(yaml.data(), yaml.size())));
  return hex;
}

namespace {

std::string errno_text() { return std::strerror(errno); }

// Writes all of `data` to `fd`: "" or the reason it could not.
std::string write_all(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_text();
    }
    if (n == 0) return "no progress writing";
    done += static_cast<size_t>(n);
  }
  return "";
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw OutputError("cannot write " + path + ": " + errno_text());
  std::string why = write_all(fd, content.data(), content.size());
  if (why.empty() && ::fsync(fd) != 0) why = errno_text();
  if (::close(fd) != 0 && why.empty()) why = errno_text();
  if (why.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) why = "rename: " + errno_text();
  if (!why.empty()) {
    ::unlink(tmp.c_str());  // a full disk keeps no half file
    throw OutputError("cannot write " + path + ": " + why);
  }
}

RunDir::OnFailure metrics_on_failure(const config::Config& config) {
  return config.run.metrics_on_failure == "warn" ? RunDir::OnFailure::kWarn : RunDir::OnFailure::kStop;
}

void RunDir::open_metrics(const std::string& file, bool append) {
  // O_APPEND always: after a failed record is cut back off (ftruncate), the next one lands at
  // the new end, not at the offset the partial write left.
  metrics_fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND | (append ? 0 : O_TRUNC), 0644);
  if (metrics_fd_ < 0) throw UserError("cannot write '" + file + "': " + errno_text());
  struct stat st {};
  if (::fstat(metrics_fd_, &st) != 0) throw UserError("cannot stat '" + file + "': " + errno_text());
  metrics_size_ = static_cast<uint64_t>(st.st_size);
}

RunDir::RunDir(const config::Config& config, bool force) {
  path_ = (fs::path(config.run.out_dir) / config.run.name).string();
  std::error_code ec;
  if (fs::exists(path_, ec)) {
    if (!force) {
      if (config.run.resume) {
        throw UserError("run directory '" + path_ +
                        "' exists and run.resume is set, but only atoll simulate resumes from "
                        "checkpoints (docs/checkpoints.md); use --force to start the run over");
      }
      throw UserError("run directory '" + path_ +
                      "' already exists; pass --force to overwrite it or change run.name");
    }
    for (const char* f : {"metrics.jsonl", "summary.json", "config.yaml"}) fs::remove(fs::path(path_) / f, ec);
  }
  fs::create_directories(path_, ec);
  if (ec) throw UserError("cannot create run directory '" + path_ + "': " + ec.message());
  write_file_atomic((fs::path(path_) / "config.yaml").string(), config::to_yaml(config));
  open_metrics((fs::path(path_) / "metrics.jsonl").string(), /*append=*/false);
  on_failure_ = metrics_on_failure(config);
}

RunDir::RunDir(const config::Config& config, Continue at) {
  path_ = (fs::path(config.run.out_dir) / config.run.name).string();
  const std::string metrics = (fs::path(path_) / "metrics.jsonl").string();
  std::error_code ec;
  const auto size = fs::file_size(metrics, ec);
  if (ec) throw UserError("cannot resume '" + path_ + "': no metrics.jsonl to continue (" + ec.message() + ")");
  if (size < at.metrics_bytes)
    throw UserError("cannot resume '" + path_ + "': metrics.jsonl has " + std::to_string(size) +
                    " bytes, fewer than the checkpoint's " + std::to_string(at.metrics_bytes));
  fs::resize_file(metrics, at.metrics_bytes, ec);
  if (ec) throw UserError("cannot resume '" + path_ + "': cannot cut metrics.jsonl: " + ec.message());
  // A run that had finished is running again: its results are written anew at its end.
  fs::remove(fs::path(path_) / "summary.json", ec);
  fs::remove(fs::path(path_) / "final_params.bin", ec);
  write_file_atomic((fs::path(path_) / "config.yaml").string(), config::to_yaml(config));
  open_metrics(metrics, /*append=*/true);
  on_failure_ = metrics_on_failure(config);
}

uint64_t RunDir::metrics_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_size_;
}

RunDir::~RunDir() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

void RunDir::record(const std::string& json_line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty() && on_failure_ == OnFailure::kStop) throw OutputError(failure_);
  const std::string line = json_line + "\n";
  std::string why = metrics_fd_ < 0 ? "an earlier partial record could not be cut off; nothing more is appended"
                                    : write_all(metrics_fd_, line.data(), line.size());
  if (why.empty()) {
    metrics_size_ += line.size();
    return;
  }
  // Part of the line may be on disk: cut it off, so that the file ends on a whole record. If
  // that fails too, nothing more is appended (the file would not end on a whole record).
  if (metrics_fd_ >= 0 && ::ftruncate(metrics_fd_, static_cast<off_t>(metrics_size_)) != 0) {
    why += "; cutting the partial record off failed too: " + errno_text();
    ::close(metrics_fd_);
    metrics_fd_ = -1;
  }
  ++lost_;
  if (failure_.empty()) {
    failure_ = path_ + "/metrics.jsonl: cannot append a record (" + why + ") after " + std::to_string(metrics_size_) +
               " bytes";
    if (on_failure_ == OnFailure::kStop) failure_ += "; the run stops (run.metrics_on_failure: stop)";
    else ATOLL_WARN(failure_ << "; the run goes on, dropping the records that cannot be written (run.metrics_on_failure: warn)");
  }
  if (on_failure_ == OnFailure::kStop) throw OutputError(failure_);
}

uint64_t RunDir::records_lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

std::string RunDir::first_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void add_outcome(JsonObject& summary, const RunOutcome& o) {
  summary.add("status", o.status);
  if (!o.error.empty()) summary.add("error", o.error);
  if (o.checkpoints) summary.add("checkpoints_asked", o.checkpoints_asked).add("checkpoints_written", o.checkpoints_written);
  if (o.records_lost > 0) summary.add("records_lost", o.records_lost).add("records_failure", o.records_failure);
}

std::string outcome_note(const RunOutcome& o) {
  std::string note;
  if (o.checkpoints)
    note += "; checkpoints: " + std::to_string(o.checkpoints_written) + " of " + std::to_string(o.checkpoints_asked) +
            " written";
  if (o.records_lost > 0)
    note += "; " + std::to_string(o.records_lost) + " record" + (o.records_lost == 1 ? "" : "s") +
            " not written to metrics.jsonl (" + o.records_failure + ")";
  return note;
}

void RunDir::write_summary(const std::string& json) {
  write_file_atomic((fs::path(path_) / "summary.json").string(), json + "\n");
}

}  // namespace atl::core
