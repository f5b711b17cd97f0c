// Helpers for the tests that run real atoll processes (processes_test, wan_test,
// start_test): files, /proc children, starting and awaiting atoll (ATOLL_BINARY), and the
// Ctrl-C check of `atoll launch`.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace atl::testing {

// A fresh directory `<tmp>/<prefix>_<pid>` holding corpus.txt, the small text corpus of the
// process tests (300 lines over 13 words).
inline std::filesystem::path make_test_dir(const std::string& prefix) {
  const auto dir = std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / "corpus.txt");
  for (int i = 0; i < 300; ++i) out << "in the beginning was the word " << i % 13 << ".\n";
  return dir;
}

// The process tests' run, written to <dir>/c.yaml (the test corpus of make_test_dir): run.name
// r, seed 5; a GPT of `layers` blocks (2 heads, dim 32, seq_len 16); `islands` islands of
// `steps` steps; then `rest` (the algorithm: section and whatever else the test sets).
struct GptRun {
  int islands = 2, steps = 10, layers = 1;
  int eval_every = 0, log_every = 5;
  std::string rest;
};
inline std::string write_gpt_config(const std::filesystem::path& dir, const GptRun& r) {
  std::ostringstream y;
  y << "run: {name: r, seed: 5, out_dir: " << (dir / "runs").string() << ", threads: 1}\n"
    << "model: {name: gpt, layers: " << r.layers << ", heads: 2, dim: 32, seq_len: 16}\n"
    << "data: {kind: text, path: " << (dir / "corpus.txt").string() << ", partition: iid}\n"
    << "train: {lr: 0.003, warmup_steps: 2, batch_size: 4, steps: " << r.steps << ", eval_every: " << r.eval_every
    << ", eval_batches: 1, log_every: " << r.log_every << "}\n"
    << "islands: {count: " << r.islands << "}\n"
    << r.rest;
  const std::filesystem::path p = dir / "c.yaml";
  std::ofstream(p) << y.str();
  return p.string();
}
// Its transport: section for a run whose ports start at `port` (test_port): the coordinator
// there, the islands from port + 1, heartbeats fast enough for the tests.
inline std::string test_transport(int port) {
  return "transport: {coordinator: \"tcp://127.0.0.1:" + std::to_string(port) + "\", base_port: " +
         std::to_string(port + 1) + ", heartbeat_ms: 100, heartbeat_timeout_ms: 1500}\n";
}

// The first of 20 ports for a test's run (coordinator, then data planes), in [base, base +
// span): below the kernel's ephemeral range (32768 and up by default), where the local ports
// of outgoing connections come from, so that no connection of a concurrent test can hold it
// (each test binary has its own range), and free when chosen: slots of 20 from one picked by
// the pid on, the first not held by a concurrent test (a lock file per slot, held until this
// process exits) whose 20 ports all bind on 127.0.0.1 now.
inline int test_port(int base, int span = 4000) {
  const int slots = span / 20;
  for (int k = 0; k < slots; ++k) {
    const int p = base + static_cast<int>((getpid() + k) % slots) * 20;
    // The block is this process's while it holds the block's lock file: a test started at
    // the same moment (ctest -j) cannot pick it before this one's processes bind it (two
    // runs sharing a coordinator port exchange islands).
    const std::string lock = (std::filesystem::temp_directory_path() / ("atoll-test-ports-" + std::to_string(p))).string();
    const int lock_fd = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
    if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (lock_fd >= 0) ::close(lock_fd);
      continue;
    }
    bool free = true;
    for (int q = p; q < p + 20 && free; ++q) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(q));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      free = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      if (fd >= 0) ::close(fd);
    }
    if (free) return p;  // the lock is kept until this process exits
    ::close(lock_fd);
  }
  return base + static_cast<int>(getpid() % slots) * 20;
}

inline std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> lines(const std::filesystem::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Direct children of `pid` (Linux /proc); ascending, so the newest child is the last.
inline std::set<pid_t> children_of(pid_t pid) {
  std::set<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t c; in >> c;) out.insert(c);
  return out;
}

inline bool alive(pid_t pid) { return kill(pid, 0) == 0; }

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The child of `launch` that runs `atoll island ... --id ID` (from /proc/PID/cmdline; rank
// R > 0: `--id ID --rank R`, rank 0: without --rank); -1 if none. By command line, not by pid
// order: pids wrap around (pid_max is 32768 on many machines).
inline pid_t island_child(pid_t launch, int id, int rank = 0) {
  for (pid_t c : children_of(launch)) {
    std::string cmdline = read("/proc/" + std::to_string(c) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const bool ranked = cmdline.find(" --rank ") != std::string::npos;
    if (cmdline.find(" island ") != std::string::npos && cmdline.find(" --id " + std::to_string(id) + " ") != std::string::npos &&
        (rank == 0 ? !ranked : cmdline.find(" --rank " + std::to_string(rank) + " ") != std::string::npos))
      return c;
  }
  return -1;
}

// Runs `atoll ARGS` to completion; its output goes to a log whose last lines a failed run
// prints (so that a failure seen only in CI says why).
inline int run_atoll(const std::string& args) {
  const std::string log = (std::filesystem::temp_directory_path() / ("atoll_proc_run_" + std::to_string(getpid()) + ".log")).string();
  const int status = std::system((std::string(ATOLL_BINARY) + " " + args + " >" + log + " 2>&1").c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) {
    std::ifstream in(log);
    std::vector<std::string> tail;
    for (std::string l; std::getline(in, l);) {
      tail.push_back(l);
      if (tail.size() > 30) tail.erase(tail.begin());
    }
    std::printf("[ atoll %s exited %d; last lines of its output ]\n", args.substr(0, args.find(' ')).c_str(), code);
    for (const auto& l : tail) std::printf("  %s\n", l.c_str());
  }
  std::filesystem::remove(log);
  return code;
}

// Starts ATOLL_BINARY with `args`, stdout and stderr into `log`. The pid, or -1.
// `new_group`: the child leads a new process group (its own children join it), so that a
// test can kill the whole run with one kill(-pid, ...).
inline pid_t spawn_atoll(const std::vector<std::string>& args, const std::filesystem::path& log,
                         bool new_group = false) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (new_group) setpgid(0, 0);
  if (!std::freopen(log.c_str(), "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(126);
  std::vector<char*> argv = {const_cast<char*>("atoll")};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(ATOLL_BINARY, argv.data());
  _exit(127);
}

// Waits up to `seconds` for `pid` to exit: its exit code (128 + signal when killed), or -1
// (then it is killed).
inline int wait_exit(pid_t pid, double seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 10; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// `atoll launch` ARGS (with `launch` first) is started with stderr to /dev/null; once it has
// `children` child processes (`what` names them) and ran `settle` longer, SIGINT: it exits
// non-zero and every child is gone within 5 s.
inline void expect_ctrl_c_leaves_no_process_behind(const std::vector<std::string>& args, size_t children,
                                                   const std::string& what, std::chrono::milliseconds settle) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stderr);
    std::vector<char*> argv = {const_cast<char*>("atoll")};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(ATOLL_BINARY, argv.data());
    _exit(127);
  }
  std::set<pid_t> kids;
  for (int i = 0; i < 100 && kids.size() < children; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kids = children_of(pid);
  }
  if (kids.size() != children) kill(pid, SIGKILL);
  ASSERT_EQ(kids.size(), children) << what;
  std::this_thread::sleep_for(settle);
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  for (int i = 0; i < 50; ++i) {
    bool any = false;
    for (pid_t k : kids) any = any || alive(k);
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t k : kids) EXPECT_FALSE(alive(k)) << "child " << k << " survived";
}

}  // namespace atl::testing
