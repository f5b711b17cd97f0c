// single_threaded and the process title (process.h).
#include "src/base/process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

extern char** environ;

namespace atl {

namespace {

char* g_area = nullptr;      // argv[0]: where the command line starts
char* g_args_end = nullptr;  // one past argv's last NUL (the kernel's arg_end)
char* g_area_end = nullptr;  // one past the last NUL of the argv and environment strings

}  // namespace

bool single_threaded() {
  std::error_code ec;
  int threads = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++threads;
  }
  return !ec && threads == 1;
}

void close_cloexec_fds() {
  std::vector<int> fds;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const int fd = std::atoi(it->path().filename().c_str());
    if (fd > 2) fds.push_back(fd);
  }
  for (int fd : fds) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC)) ::close(fd);
  }
}

void default_signals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGINT, &dfl, nullptr);
  ::sigaction(SIGTERM, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

void run_forked(const MainFunction& main, const std::vector<std::string>& args) {
  default_signals();
  close_cloexec_fds();
  set_process_title(args);
  int code = 1;
  try {
    code = main(args);
  } catch (...) {
  }
  std::fflush(nullptr);
  ::_exit(code);
}

void init_process_title(int argc, char** argv) {
  if (argc < 1 || argv == nullptr || argv[0] == nullptr) return;
  // The strings of argv and then environ lie back to back; the area ends where they stop
  // being contiguous.
  char* end = argv[0];
  for (int i = 0; i < argc && argv[i] == end; ++i) end = argv[i] + std::strlen(argv[i]) + 1;
  g_area = argv[0];
  g_args_end = end;
  for (char** e = environ; e != nullptr && *e != nullptr && *e == end; ++e) end = *e + std::strlen(*e) + 1;
  g_area_end = end;
}

void set_process_title(const std::vector<std::string>& args) {
  if (g_area == nullptr) return;
  std::string title;
  for (const auto& a : args) title.append(a).push_back('\0');
  const size_t args_room = static_cast<size_t>(g_args_end - g_area);
  if (title.size() > args_room && g_area_end > g_args_end) {
    // Beyond argv: the environment strings' memory too, once they live elsewhere.
    static bool moved = false;
    if (!moved) {
      size_t n = 0;
      while (environ[n] != nullptr) ++n;
      char** copy = static_cast<char**>(std::malloc((n + 1) * sizeof(char*)));
      if (copy == nullptr) return;
      for (size_t i = 0; i < n; ++i) copy[i] = ::strdup(environ[i]);
      copy[n] = nullptr;
      environ = copy;
      moved = true;
    }
    // One string: the kernel shows it up to its first NUL once argv's last byte is not NUL.
    for (size_t i = 0; i + 1 < title.size(); ++i)
      if (title[i] == '\0') title[i] = ' ';
  }
  const size_t room = static_cast<size_t>((title.size() > args_room ? g_area_end : g_args_end) - g_area);
  if (title.size() > room) title.resize(room);
  if (!title.empty()) title.back() = '\0';
  std::memset(g_area, 0, room);
  std::memcpy(g_area, title.data(), title.size());
}

}  // namespace atl
