#include "src/sweep/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace atl::sweep {
namespace {

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const auto& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

pid_t spawn_logged(const std::string& path, const std::vector<std::string>& argv,
                   const std::string& log_path, const WarmMain& warm) {
  // Everything the child needs is made before fork(): after it, the child makes only
  // async-signal-safe calls until exec (or, single-threaded, calls `warm`).
  const bool warm_start = warm && single_threaded();
  std::fflush(nullptr);  // what this process has buffered is written once, not by both
  auto args = c_argv(argv);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot write " + log_path + ": " + std::strerror(errno));
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    if (null >= 0) ::close(null);
    throw std::runtime_error("cannot start " + path + ": " + std::strerror(err));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // [impl choice] fork + exec rather than posix_spawn for this: a sweep killed with SIGKILL
    // takes its runs with it instead of leaving them to race the next `atoll sweep`.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the sweep died before prctl
    atl::default_signals();
    if (null >= 0) ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    if (warm_start) atl::run_forked(warm, argv);
    ::execve(path.c_str(), args.data(), environ);
    const char msg[] = "atoll sweep: cannot exec the atoll binary\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that kill(-pid) reaches it from now on
  ::close(log);
  if (null >= 0) ::close(null);
  return pid;
}

int run_and_wait(const std::vector<std::string>& argv) {
  pid_t pid = 0;
  auto args = c_argv(argv);
  if (posix_spawn(&pid, argv[0].c_str(), nullptr, nullptr, args.data(), environ) != 0) return 127;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 127;
}

}  // namespace atl::sweep
