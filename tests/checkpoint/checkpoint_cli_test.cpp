// The checkpoint commands through the atoll binary: `simulate --resume` continues a run
// killed by the checkpoint writer's fault-injection point, and `export` writes the .pt file;
// their refusals are one line with exit code 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_test_util.h"

namespace fs = std::filesystem;

namespace {

using atl::testing::Result;
using atl::testing::run;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CheckpointCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atoll_ckpt_cli_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << std::string(20000, 'a') + std::string(20000, 'b');
    std::ofstream(dir_ / "c.yaml")
        << "run: {name: r, seed: 3, out_dir: " << (dir_ / "runs").string() << ", threads: 1}\n"
        << "model: {name: gpt, layers: 1, heads: 2, dim: 16, seq_len: 16}\n"
        << "data: {kind: text, path: " << (dir_ / "corpus.txt").string() << "}\n"
        << "train: {batch_size: 4, steps: 30, eval_every: 10, eval_batches: 2}\n"
        << "islands: {count: 2}\n"
        << "algorithm: {name: diloco, inner_steps: 5}\n"
        << "checkpoint: {every: 5}\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string config() const { return (dir_ / "c.yaml").string(); }
  fs::path dir_;
};

TEST_F(CheckpointCli, ResumeAfterAKillMidWriteThenExport) {
  Result ref = run("simulate " + config() + " --set run.name=ref -q");
  ASSERT_EQ(ref.code, 0) << ref.output;
  // Killed (SIGKILL: no exit code) while writing its second checkpoint.
  ::setenv("ATOLL_CHECKPOINT_FAULT", "kill_mid_write:2", 1);
  Result killed = run("simulate " + config() + " -q");
  ::unsetenv("ATOLL_CHECKPOINT_FAULT");
  EXPECT_EQ(killed.code, 128 + 9) << killed.output;  // the shell reports SIGKILL so
  EXPECT_FALSE(fs::exists(dir_ / "runs/r/final_params.bin"));
  // Without --resume the directory is in the way; with it the run goes on.
  Result again = run("simulate " + config() + " -q");
  EXPECT_EQ(again.code, 2) << again.output;
  Result resumed = run("simulate " + config() + " --resume -q");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(slurp(dir_ / "runs/r/final_params.bin") == slurp(dir_ / "runs/ref/final_params.bin"));

  Result e = run("export " + (dir_ / "runs/r").string());
  ASSERT_EQ(e.code, 0) << e.output;
  EXPECT_NE(e.output.find("final_params.pt"), std::string::npos) << e.output;
  EXPECT_TRUE(fs::exists(dir_ / "runs/r/final_params.pt"));
  Result bad = run("export " + (dir_ / "runs/r").string() + " --format npz");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--format 'npz'"), std::string::npos) << bad.output;
  Result none = run("export " + (dir_ / "nowhere").string());
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("not a run directory"), std::string::npos) << none.output;
}

}  // namespace
