#include "src/core/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "src/base/hash.h"
#include "src/base/status.h"

namespace fs = std::filesystem;

namespace atl::core {

std::string config_hash(const config::Config& config) {
  const std::string yaml = config::to_yaml(config);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, static_cast<uint64_t>(xxh64(yaml.data(), yaml.size())));
  return hex;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + ": " + std::strerror(errno));
  }
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
  const std::string metrics = (fs::path(path_) / "metrics.jsonl").string();
  metrics_ = std::fopen(metrics.c_str(), "w");
  if (!metrics_) throw UserError("cannot write '" + metrics + "': " + std::strerror(errno));
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
  metrics_ = std::fopen(metrics.c_str(), "a");
  if (!metrics_) throw UserError("cannot write '" + metrics + "': " + std::strerror(errno));
}

uint64_t RunDir::metrics_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fflush(metrics_);
  struct stat st {};
  if (::fstat(::fileno(metrics_), &st) != 0) throw std::runtime_error("cannot stat metrics.jsonl: " + std::string(std::strerror(errno)));
  return static_cast<uint64_t>(st.st_size);
}

RunDir::~RunDir() {
  if (metrics_) std::fclose(metrics_);
}

void RunDir::record(const std::string& json_line) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fputs(json_line.c_str(), metrics_);
  std::fputc('\n', metrics_);
  std::fflush(metrics_);
}

void RunDir::write_summary(const std::string& json) {
  write_file_atomic((fs::path(path_) / "summary.json").string(), json + "\n");
}

}  // namespace atl::core
