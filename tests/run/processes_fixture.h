// The Processes fixture of the real-process tests (processes_test.cpp,
// ranks_processes_test.cpp): a test directory, a port range, a small GPT config, and the
// shared helpers of tests/run/process_test_util.h under short names.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/json.h"
#include "tests/run/process_test_util.h"

namespace atl::testing::processes {

namespace fs = std::filesystem;
using atl::core::json_find_number;
using atl::core::json_find_string;
using atl::testing::alive;
using atl::testing::children_of;
using atl::testing::lines;
using atl::testing::read;


inline int run(const std::string& args) { return atl::testing::run_atoll(args); }

// The shared helpers of tests/run/process_test_util.h under this file's short names.
inline pid_t spawn(const std::vector<std::string>& args, const fs::path& log) { return atl::testing::spawn_atoll(args, log); }
inline int wait_bounded(pid_t pid, int seconds) { return atl::testing::wait_exit(pid, seconds); }

// Polls `metrics` for up to `seconds` until some line contains all of `parts`.
inline bool wait_for_record(const fs::path& metrics, const std::vector<std::string>& parts, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    for (const auto& l : lines(metrics)) {
      bool all = true;
      for (const auto& p : parts) all = all && l.find(p) != std::string::npos;
      if (all) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

class Processes : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = atl::testing::make_test_dir("atoll_proc_test");
    port_ = atl::testing::test_port(2000);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string config(int islands, int steps, const std::string& extra = "") {
    return atl::testing::write_gpt_config(
        dir_, {islands, steps, 1, 0, 5, "algorithm: {name: diloco, inner_steps: 5}\n" + atl::testing::test_transport(port_) + extra});
  }
  fs::path dir_;
  int port_ = 0;
};

// DeMo with small chunks, for the test GPT.
inline const char* const kDemo = " --set 'algorithm={name: demo, chunk: 16, topk: 8}'";

}  // namespace atl::testing::processes

using namespace atl::testing::processes;  // NOLINT: the tests' short names
