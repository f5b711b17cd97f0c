// What a process may learn and change about itself: whether it has one thread (a fork of it
// may then run on without exec), and the command line others see (ps, /proc/PID/cmdline).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace atl {

// Whether the calling process has exactly one thread (/proc/self/task). fork() copies no
// thread but every lock: only the child of a single-threaded process may run on without exec.
bool single_threaded();

// Closes what exec would: every descriptor marked close-on-exec. For a forked copy that runs
// on without exec.
void close_cloexec_fds();

// SIGINT and SIGTERM to their default action and no signal blocked: what a child of a
// process that catches them (launch, a sweep) starts from.
void default_signals();

// A command line's main: argv as main() gets it, returns the exit code.
using MainFunction = std::function<int(const std::vector<std::string>& argv)>;

// In a child just forked from a single-threaded process (its stdio already in place): runs
// main(args) as if `args` had been executed — default_signals(), no
// close-on-exec descriptors, `args` as the command line (set_process_title) — and exits with
// its code by _exit (the destructors and atexit handlers are the parent's). An exception
// out of main exits with 1.
[[noreturn]] void run_forked(const MainFunction& main, const std::vector<std::string>& args);

// Remembers where the process's command line lives (main's argv): call first thing in main.
void init_process_title(int argc, char** argv);

// Makes `args` the command line that ps and /proc/PID/cmdline show, as if the process had
// been started with them: a forked copy that runs another command than its parent
// (`atoll launch`'s islands, src/run/launch.cpp) is found by it. Rewrites the memory of the
// original argv (and of the environment strings after it, whose copies move to the heap
// first) the way setproctitle(3) does. When the arguments fit in the original argv area they
// stay separate; beyond it they are one string joined by spaces, truncated to the area.
// Without init_process_title, does nothing.
void set_process_title(const std::vector<std::string>& args);

}  // namespace atl
