// Child processes for the sweep: runs (`atoll simulate`) and the report script.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "src/base/process.h"

namespace atl::sweep {

// A command line run in a forked copy of the calling process instead of an executed binary:
// argv as main() would get it; returns the exit code.
using WarmMain = atl::MainFunction;

// Runs `path` with `argv` in a new process group (so that a terminal's Ctrl-C reaches only
// the sweep, which then stops its runs), stdin from /dev/null, stdout and stderr appended to
// `log_path`. SIGINT and SIGTERM have their default action in the child, which gets SIGTERM
// when the calling thread dies (PR_SET_PDEATHSIG: a sweep killed with SIGKILL leaves no run
// behind). Returns the pid (= its process group id). A path that cannot be executed gives a
// child that exits with 127; throws std::runtime_error when no child can be made.
//
// With `warm`, the child does not execute `path`: it calls warm(argv) and exits with its
// result, so it starts with everything this process has loaded (libtorch among it); it
// shows argv as its command line and has no close-on-exec descriptors (src/base/process.h). Only
// while this process has a single thread: fork() copies no thread but every lock, so the
// child of a multi-threaded process could wait forever on a lock a vanished thread held
// (OpenMP's pool among them); then it executes `path` as without `warm`.
pid_t spawn_logged(const std::string& path, const std::vector<std::string>& argv,
                   const std::string& log_path, const WarmMain& warm = {});

// Whether the calling process has exactly one thread (src/base/process.h).
using atl::single_threaded;

// Runs argv[0] (a path) with inherited stdio and waits for it. Returns its exit code, or
// 128 + the signal that killed it; 127 when it cannot be started.
int run_and_wait(const std::vector<std::string>& argv);

}  // namespace atl::sweep
