// The atoll binary as a test runs it (cli_test, sweep_cli_test): exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace atl::testing {

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs ATOLL_BINARY ARGS (in directory CWD when given) and waits for it.
inline Result run(const std::string& args, const std::string& cwd = "") {
  const std::string cd = cwd.empty() ? "" : "cd '" + cwd + "' && ";
  const std::string cmd = cd + std::string(ATOLL_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace atl::testing
