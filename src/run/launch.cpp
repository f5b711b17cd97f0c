// `atoll launch CONFIG`: the coordinator and every island of CONFIG as child processes of
// this one, on this machine. Children's output is merged line by line with a prefix
// ("[coordinator] ", "[island 2] "). SIGINT/SIGTERM are forwarded to every child; children
// die with us (PR_SET_PDEATHSIG), so nothing is left behind even if launch is killed.
// Exit code: 0 when every child exited 0, else 1.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/base/log.h"
#include "src/run/processes.h"

namespace atl::run {
namespace {

struct Child {
  std::string prefix;
  pid_t pid = -1;
  int fd = -1;           // read end of the child's stdout+stderr
  std::string pending;   // a partial line
  int status = 0;
  bool exited = false;
};

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

Child spawn(const std::string& prefix, const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // launch died between fork and prctl
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "exec failed: %s\n", std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  Child c;
  c.prefix = prefix;
  c.pid = pid;
  c.fd = fds[0];
  return c;
}

void drain(Child& c, bool flush) {
  char buf[4096];
  for (;;) {
    const ssize_t n = read(c.fd, buf, sizeof buf);
    if (n <= 0) break;
    c.pending.append(buf, static_cast<size_t>(n));
    if (n < static_cast<ssize_t>(sizeof buf)) break;
  }
  size_t start = 0, nl;
  while ((nl = c.pending.find('\n', start)) != std::string::npos) {
    std::fprintf(stderr, "%s%s\n", c.prefix.c_str(), c.pending.substr(start, nl - start).c_str());
    start = nl + 1;
  }
  c.pending.erase(0, start);
  // progress lines use '\r'; print what is there when the child is gone
  if (flush && !c.pending.empty()) {
    std::fprintf(stderr, "%s%s\n", c.prefix.c_str(), c.pending.c_str());
    c.pending.clear();
  }
}

}  // namespace

int launch(const config::Config& config, const ProcessOptions& options) {
  check_real_run(config);
  std::vector<std::string> common = {options.config_path};
  for (const auto& o : options.overrides) {
    common.push_back("--set");
    common.push_back(o);
  }
  common.push_back("--quiet");
  std::vector<Child> children;
  auto args = [&](const std::string& cmd, std::vector<std::string> extra) {
    std::vector<std::string> a = {"atoll", cmd};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  children.push_back(spawn("[coordinator] ", args("coordinator", options.force ? std::vector<std::string>{"--force"} : std::vector<std::string>{})));
  usleep(200 * 1000);  // let the coordinator bind before the islands dial (they retry anyway)
  for (int i = 0; i < config.islands.count; ++i) {
    children.push_back(spawn("[island " + std::to_string(i) + "] ", args("island", {"--id", std::to_string(i)})));
  }
  ATOLL_INFO("launch: coordinator + " << config.islands.count << " islands started (pids "
                                      << children.front().pid << "..." << children.back().pid << ")");

  int forwarded = 0;
  size_t alive = children.size();
  int lonely_ticks = 0;  // polls since every island exited while the coordinator still runs
  while (alive > 0) {
    if (alive == 1 && !children.front().exited && ++lonely_ticks == 25) {
      // every island is gone (e.g. all failed before joining): the coordinator would wait
      // for them forever; stop it so that it writes its summary and exits.
      kill(children.front().pid, SIGTERM);
    }
    if (g_signal != 0 && forwarded != g_signal) {
      forwarded = g_signal;
      for (auto& c : children) if (!c.exited) kill(c.pid, forwarded);
    }
    std::vector<pollfd> pfds;
    for (auto& c : children) pfds.push_back({c.fd, POLLIN, 0});
    poll(pfds.data(), pfds.size(), 200);
    for (size_t i = 0; i < children.size(); ++i) {
      if (pfds[i].revents & (POLLIN | POLLHUP)) drain(children[i], false);
    }
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        drain(c, true);
        c.exited = true;
        c.status = status;
        --alive;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          ATOLL_WARN("launch: " << c.prefix << "exited with "
                                << (WIFEXITED(status) ? "code " + std::to_string(WEXITSTATUS(status))
                                                      : "signal " + std::to_string(WTERMSIG(status))));
        }
      }
    }
  }
  int rc = 0;
  for (auto& c : children) {
    close(c.fd);
    if (!(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)) rc = 1;
  }
  return g_signal != 0 ? 130 : rc;
}

}  // namespace atl::run
