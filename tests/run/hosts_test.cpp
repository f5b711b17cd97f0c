// `atoll launch` with a `hosts:` section: the per-host commands it prints, the check that
// islands elsewhere can reach the coordinator, and a run started through ssh. The ssh used
// by the last test is a stand-in placed first in PATH that runs the remote command on this
// machine (as `ssh host cmd` does on the host), so the whole --ssh path runs for real.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/run/process_test_util.h"

namespace fs = std::filesystem;

namespace {

struct Result {
  int code = -1;
  std::string output;
};

// Runs a shell command, capturing stdout and stderr.
Result shell(const std::string& command) {
  Result r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Hosts : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atoll_hosts_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << [] {
      std::string s;
      for (int i = 0; i < 300; ++i) s += "and the evening and the morning were day " + std::to_string(i % 7) + ".\n";
      return s;
    }();
    port_ = atl::testing::test_port(18000, 2000);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Two islands; `hosts` and `coordinator` fill in the placement.
  std::string config(const std::string& hosts, const std::string& coordinator) {
    std::ostringstream y;
    y << "run: {name: h, seed: 1, out_dir: " << (dir_ / "runs").string() << ", threads: 1}\n"
      << "model: {name: gpt, layers: 1, heads: 2, dim: 16, seq_len: 8}\n"
      << "data: {kind: text, path: " << (dir_ / "corpus.txt").string() << "}\n"
      << "train: {batch_size: 2, steps: 6, eval_every: 0, eval_batches: 1, warmup_steps: 1}\n"
      << "islands: {count: 2}\n"
      << "algorithm: {name: diloco, inner_steps: 3}\n"
      << "transport: {coordinator: \"" << coordinator << "\", base_port: " << port_ + 1
      << ", heartbeat_ms: 100, heartbeat_timeout_ms: 2000}\n"
      << "hosts: " << hosts << "\n";
    const fs::path p = dir_ / "c.yaml";
    std::ofstream(p) << y.str();
    return p.string();
  }
  fs::path dir_;
  int port_ = 0;
};

TEST_F(Hosts, PrintsTheCommandOfEveryHost) {
  const std::string cfg = config("{islands: [alice@10.0.0.5, bob@10.0.0.6], workdir: /srv/atoll}",
                                 "tcp://10.0.0.1:29500");
  const Result r = shell(std::string(ATOLL_BINARY) + " launch " + cfg);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ssh alice@10.0.0.5 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ssh bob@10.0.0.6 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cd '\\''/srv/atoll'\\''"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("transport.host=10.0.0.6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# coordinator"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs/h")) << "printing must not start anything";
}

TEST_F(Hosts, RefusesALoopbackCoordinatorForIslandsElsewhere) {
  const std::string cfg = config("{islands: [alice@10.0.0.5, bob@10.0.0.6]}", "tcp://127.0.0.1:29500");
  const Result r = shell(std::string(ATOLL_BINARY) + " launch " + cfg);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("key 'transport.coordinator'"), std::string::npos) << r.output;
  const std::string wrong = config("{islands: [a]}", "tcp://10.0.0.1:29500");
  const Result count = shell(std::string(ATOLL_BINARY) + " launch " + wrong);
  EXPECT_EQ(count.code, 2) << count.output;
  EXPECT_NE(count.output.find("hosts.islands"), std::string::npos) << count.output;
}

TEST_F(Hosts, SshStartsEveryProcessAndTheRunCompletes) {
  // ssh [-o X]... HOST COMMAND -> sh -c COMMAND, here.
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "ssh") << "#!/bin/sh\n"
                                "while [ \"$1\" = -o ]; do shift 2; done\n"
                                "echo \"ssh to $1\" >> \"" << (dir_ / "ssh.log").string() << "\"\n"
                                "shift\nexec sh -c \"$1\"\n";
  fs::permissions(bin / "ssh", fs::perms::owner_all);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port_);
  const std::string cfg = config("{coordinator: 127.0.0.1, islands: [127.0.0.1, 127.0.0.1], workdir: " +
                                     dir_.string() + ", binary: " + ATOLL_BINARY + "}",
                                 endpoint);
  const Result r = shell("PATH=" + bin.string() + ":$PATH timeout 120 " + ATOLL_BINARY + " launch --ssh " + cfg);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream log(dir_ / "ssh.log");
  std::string all((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 3) << all;  // coordinator + 2 islands
  std::ifstream summary(dir_ / "runs/h/summary.json");
  std::string s((std::istreambuf_iterator<char>(summary)), std::istreambuf_iterator<char>());
  EXPECT_NE(s.find("\"islands_finished\":2"), std::string::npos) << s;
}

// An island whose ssh cannot reach its host (ssh exits 255 at once): launch reports it to the
// coordinator through the coordinator's own ssh, which fails the run at once naming it,
// instead of waiting transport.join_timeout_s (60 s here); launch ends with one closing line.
TEST_F(Hosts, SshThatCannotReachAnIslandsHostFailsTheRunAtOnce) {
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "ssh") << "#!/bin/sh\n"
                                "while [ \"$1\" = -o ]; do shift 2; done\n"
                                "if [ \"$1\" = down@127.0.0.2 ]; then\n"
                                "  echo \"ssh: connect to host 127.0.0.2 port 22: Connection refused\" >&2; exit 255\n"
                                "fi\n"
                                "shift\nexec sh -c \"$1\"\n";
  fs::permissions(bin / "ssh", fs::perms::owner_all);
  // 127.0.0.2: a loopback address that does not read as one to the check above.
  const std::string endpoint = "tcp://127.0.0.2:" + std::to_string(port_);
  const std::string cfg = config("{coordinator: 127.0.0.1, islands: [127.0.0.1, down@127.0.0.2], workdir: " +
                                     dir_.string() + ", binary: " + ATOLL_BINARY + "}",
                                 endpoint);
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = shell("PATH=" + bin.string() + ":$PATH timeout 120 " + ATOLL_BINARY + " launch --ssh " + cfg +
                         " --set transport.join_timeout_s=60 --set transport.heartbeat_timeout_ms=15000");
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_LT(wall, 40) << r.output;
  EXPECT_NE(r.output.find("missing: island 1 (its process ended with exit code 255 before it joined)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("launch: the run failed: the coordinator exited with exit code 1"), std::string::npos) << r.output;
}

}  // namespace
