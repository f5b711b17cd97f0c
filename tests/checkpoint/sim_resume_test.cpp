// Simulator resume (docs/checkpoints.md "Resuming"): a real process running a simulation
// (this test binary started again as SimResumeChild.Run) is killed with SIGKILL, from
// outside at a random step or by the checkpoint writer's fault-injection point in the middle
// of a write, then the run is resumed (run.resume); it ends with final_params.bin bitwise
// equal to the uninterrupted run's and metrics.jsonl equal to it except for wall_* fields.
// Also the export to PyTorch and the refusals.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/base/status.h"
#include "src/config/config.h"
#include "src/core/export.h"
#include "src/core/simulator.h"
#include "src/core/validate.h"

namespace fs = std::filesystem;

namespace {

// What `atoll simulate CONFIG --set run.name=NAME [--set ...]` does, in this process.
// Returns "" or the UserError's line.
std::string simulate(const std::string& config, const std::string& name, std::vector<std::string> sets = {}) {
  sets.push_back("run.name=" + name);
  try {
    atl::config::Config c = atl::config::load_config(config, sets);
    atl::core::validate_config(c, atl::core::Target::kSimulate);
    atl::core::SimulateOptions o;
    o.quiet = true;
    atl::core::simulate(c, o);
  } catch (const atl::UserError& e) {
    return e.what();
  }
  return "";
}

// The child process: a simulation of ATOLL_RESUME_CONFIG as run ATOLL_RESUME_NAME.
TEST(SimResumeChild, Run) {
  const char* config = std::getenv("ATOLL_RESUME_CONFIG");
  const char* name = std::getenv("ATOLL_RESUME_NAME");
  if (config == nullptr || name == nullptr) GTEST_SKIP() << "runs only as the child of the SimResume tests";
  EXPECT_EQ(simulate(config, name), "");
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// metrics.jsonl without the fields named wall_* (wall-clock values differ between runs).
std::string without_wall(const std::string& metrics) {
  std::string out;
  size_t at = 0;
  for (size_t w; (w = metrics.find("\"wall_", at)) != std::string::npos;) {
    size_t end = metrics.find_first_of(",}", w);
    size_t begin = w;
    if (metrics[end] == ',') ++end;               // "wall_x":v,  -> drop the comma after
    else if (metrics[begin - 1] == ',') --begin;  // ,"wall_x":v} -> drop the comma before
    out.append(metrics, at, begin - at);
    at = end;
  }
  out.append(metrics, at, std::string::npos);
  return out;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

const char* const kEvents =
    ", events: [{kill: 1, at_step: 12}, {rejoin: 1, at_time_s: 2.5}, {add: 1, at_time_s: 3.5}, "
    "{kill: 0, at_time_s: 5.0}]";

class SimResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atoll_resume_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::string corpus;
    for (int i = 0; i < 3000; ++i) corpus += "the quick brown fox " + std::to_string(i % 37) + " jumps. ";
    std::ofstream(dir_ / "corpus.txt") << corpus;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small GPT with dropout (libtorch's RNG), compute jitter and stragglers (the cost
  // model's RNGs), network jitter (the hub's RNG), 3 islands, evals and logs at steps that
  // do not fall on checkpoints, so every piece of state is exercised.
  // `variant`: an algorithm name, or diloco_delayed / diloco_eager (diloco with
  // algorithm.overlap: an exchange in flight at every checkpoint; eager with int8 and error
  // feedback, so the compensated contribution in flight is saved too), diloco_events (diloco
  // with islands.events: island 1 killed at step 12 and rejoining at 2.5 s, an island added at
  // 3.5 s, island 0 (the evaluator) killed at 5 s), diloco_events1 (the same with a
  // checkpoint at every step: the one of step 16, where the joiners are handed over, is skipped),
  // diloco_sharded (diloco_eager's exchange sharded over islands of two ranks, with
  // diloco_events' events: docs/ranks.md).
  std::string config(const std::string& variant, int steps = 60) {
    const std::string algorithm = variant.rfind("diloco_", 0) == 0   ? "diloco"
                                  : variant.rfind("dipaco_", 0) == 0 ? "dipaco"
                                  : variant.rfind("async_", 0) == 0  ? "async_local_sgd"
                                  : variant == "fedavg_kill"         ? "fedavg"
                                                                     : variant;
    std::ostringstream y;
    y << "run: {name: x, seed: 7, out_dir: " << (dir_ / "runs").string() << ", threads: 1}\n"
      << "model: {name: gpt, layers: 2, heads: 2, dim: 16, seq_len: 16, dropout: 0.1}\n"
      << "data: {kind: text, path: " << (dir_ / "corpus.txt").string() << "}\n"
      << "train: {optimizer: adamw, lr: 0.003, warmup_steps: 5, batch_size: 4, steps: " << steps
      << ", eval_every: 7, eval_batches: 2, log_every: 3}\n"
      << "islands: {count: 3"
      << (variant == "diloco_sharded" ? ", ranks: 2, shard_exchange: true" : "")
      << (variant.rfind("diloco_events", 0) == 0 || variant == "diloco_sharded" ? kEvents : variant == "fedavg_kill" ? ", events: [{kill: 1, at_time_s: 1.5}]" : "")
      << "}\n"
      << "compute: {step_time_s: 0.1, jitter: 0.2, straggler_prob: 0.1"
      << (algorithm == "async_local_sgd" ? ", speeds: [1.0, 0.7, 0.45]" : "") << "}\n"
      << "network: {latency_ms: 20, jitter_ms: 5, bandwidth_mbps: 100}\n"
      << "algorithm: {name: " << algorithm;
    if (algorithm == "diloco") y << ", inner_steps: 4";
    if (variant == "diloco_delayed") y << ", overlap: delayed";
    if (variant == "diloco_eager" || variant == "diloco_sharded") y << ", overlap: eager, error_feedback: true";
    // Fragments in flight across step boundaries (overlap_steps), int8 with error feedback.
    if (algorithm == "streaming_diloco") y << ", inner_steps: 4, fragments: 2, overlap_steps: 1, error_feedback: true";
    // DiPaCo 2 paths over 3 islands: module 0 shared by all, module 1 by islands 0 and 2
    // (path 0), module 2 island 1's alone; int8 with error feedback per module.
    if (algorithm == "dipaco") y << ", inner_steps: 4, error_feedback: true";
    // FedAvg: 2 of 3 clients per round, 3 local steps (not a divisor of the 5 rounds between
    // checkpoints: clients reach a cut at different steps), int8 with error feedback, outer
    // Nesterov (its state is saved with the server's).
    if (algorithm == "fedavg") y << ", client_fraction: 0.67, local_steps: 3, error_feedback: true";
    // async_local_sgd: islands of three speeds (their pushes and pulls interleave in virtual
    // time; the cut falls between them, docs/checkpoints.md), Dynamic Local Updates, a grace
    // window, Delayed Nesterov with a buffer of 2, int8 with error feedback. async_naive: one
    // outer Nesterov step per arrival (the outer optimizer's state), H steps per task.
    if (variant == "async_local_sgd")
      y << ", inner_steps: 4, dynamic_local_updates: true, min_local_steps: 1, grace_s: 0.05, buffer_size: 2, "
           "dn_c: 0.25, error_feedback: true";
    if (variant == "async_naive") y << ", inner_steps: 3, async_update: naive, dynamic_local_updates: false";
    y << "}\n";
    if (algorithm == "streaming_diloco" || algorithm == "dipaco" || algorithm == "fedavg" || variant == "diloco_eager" ||
        variant == "diloco_sharded" ||
        variant == "async_local_sgd")
      y << "compression: [{quantize: int8}]\n";
    // dipaco_tasks: a 2x2 (4 paths) on the 3 islands, which take the paths in turn: every
    // module's global and outer state on every island, checkpoints in the middle of tasks.
    if (variant == "dipaco_tasks")
      y << "dipaco: {levels: [{blocks: [0], modules: 2}, {blocks: [1], modules: 2}], routing: none}\n";
    else if (algorithm == "dipaco")
      y << "dipaco: {levels: [{blocks: [1], modules: 2}], routing: none}\n";
    y << "checkpoint: {every: " << (variant == "diloco_events1" ? 1 : 5) << ", keep: 2}\n";
    const fs::path p = dir_ / (variant + ".yaml");
    std::ofstream(p) << y.str();
    return p.string();
  }

  fs::path run_dir(const std::string& name) const { return dir_ / "runs" / name; }

  // Starts a child process that simulates CONFIG as run NAME.
  pid_t start(const std::string& config, const std::string& name, const std::string& fault = "") {
    std::fflush(stdout);  // or the child's exit writes the parent's buffered lines again
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (!fault.empty()) ::setenv("ATOLL_CHECKPOINT_FAULT", fault.c_str(), 1);
      else ::unsetenv("ATOLL_CHECKPOINT_FAULT");
      ::setenv("ATOLL_RESUME_CONFIG", config.c_str(), 1);
      ::setenv("ATOLL_RESUME_NAME", name.c_str(), 1);
      FILE* quiet = std::freopen("/dev/null", "w", stdout);
      (void)quiet;
      ::execl("/proc/self/exe", "sim_resume_test", "--gtest_filter=SimResumeChild.Run", nullptr);
      ::_exit(127);
    }
    return pid;
  }

  // The uninterrupted run `ref`, and run NAME resumed after it was killed; asserts the two
  // end alike.
  void expect_same_as_uninterrupted(const std::string& config, const std::string& name) {
    const std::string ref = "ref_" + name;
    ASSERT_EQ(simulate(config, ref), "");
    ASSERT_EQ(simulate(config, name, {"run.resume=true"}), "");
    const std::string a = slurp(run_dir(ref) / "final_params.bin");
    const std::string b = slurp(run_dir(name) / "final_params.bin");
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "final_params.bin differs after the resume";
    const std::string ma = without_wall(slurp(run_dir(ref) / "metrics.jsonl"));
    const std::string mb = without_wall(slurp(run_dir(name) / "metrics.jsonl"));
    EXPECT_EQ(ma, mb);
    EXPECT_EQ(count(mb, "\"event\":\"start\""), 1);
    EXPECT_EQ(count(mb, "\"event\":\"end\""), 1);
    EXPECT_NE(mb.find("\"event\":\"eval\""), std::string::npos);
  }

  fs::path dir_;
};

// Killed by the fault-injection point in the middle of its third checkpoint write: the
// half-written file is never used, the second checkpoint is. (streaming_diloco: a due
// checkpoint moves past a fragment in flight, to steps 5, 11, 15; fedavg: cut at server
// rounds 5, 10, 15 of its 20.)
TEST_F(SimResume, KilledMidCheckpointWriteResumesFromThePreviousOne) {
  for (const char* algorithm :
       {"diloco", "ddp", "streaming_diloco", "demo", "dipaco", "dipaco_tasks", "diloco_delayed", "diloco_eager",
        "diloco_events", "diloco_sharded", "fedavg", "fedavg_kill", "async_local_sgd", "async_naive"}) {
    SCOPED_TRACE(algorithm);
    const std::string cfg = config(algorithm);
    const std::string name = std::string("fault_") + algorithm;
    const pid_t pid = start(cfg, name, "kill_mid_write:3");
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    const fs::path ckpts = run_dir(name) / "checkpoints";
    EXPECT_FALSE(fs::exists(run_dir(name) / "final_params.bin"));
    if (std::string(algorithm).rfind("async_", 0) == 0) {
      // Cut in virtual time: a cut with a push in flight across it is skipped, so which
      // cuts are the first three written depends on the run. Two complete, one torn.
      std::vector<std::string> complete, torn;
      for (const auto& f : fs::directory_iterator(ckpts))
        (f.path().extension() == ".ckpt" ? complete : torn).push_back(f.path().filename().string());
      EXPECT_EQ(complete.size(), 2u);
      ASSERT_EQ(torn.size(), 1u);
      EXPECT_EQ(torn[0].rfind(".step-", 0), 0u) << torn[0];
      expect_same_as_uninterrupted(cfg, name);
      continue;
    }
    const std::string second = algorithm == std::string("streaming_diloco") ? "11" : "10";
    EXPECT_TRUE(fs::exists(ckpts / ("step-0000000000" + second + ".ckpt")));
    EXPECT_FALSE(fs::exists(ckpts / "step-000000000015.ckpt"));
    EXPECT_TRUE(fs::exists(ckpts / ".step-000000000015.ckpt.tmp"));
    expect_same_as_uninterrupted(cfg, name);
  }
}

// SIGKILL from outside at a random moment of the run, then --resume.
// With islands.events, killed later: the checkpoint it resumes from holds a dead island
// (killed at step 12, rejoining after the resume) and is followed by the rejoin, the added
// island and the evaluator's death, all replayed alike.
TEST_F(SimResume, RunWithKillRejoinAndAddEventsResumesBitwise) {
  const std::string cfg = config("diloco_events");
  const pid_t pid = start(cfg, "events", "kill_mid_write:4");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  const std::string metrics = slurp(run_dir("events") / "metrics.jsonl");
  EXPECT_NE(metrics.find("\"change\":\"killed\""), std::string::npos) << "the kill at step 12 came before";
  expect_same_as_uninterrupted(cfg, "events");
  const std::string m = slurp(run_dir("events") / "metrics.jsonl");
  EXPECT_NE(m.find("\"change\":\"rejoined\""), std::string::npos);
  EXPECT_NE(m.find("\"change\":\"added\""), std::string::npos);
  EXPECT_EQ(count(m, "\"change\":\"killed\""), 2);

  // A checkpoint at every step, killed writing the one of step 17: the resume from step 15
  // replays the skipped checkpoint of step 16 (joiners in transit) and everything after.
  const std::string every1 = config("diloco_events1");
  const pid_t pid1 = start(every1, "events1", "kill_mid_write:16");
  ASSERT_EQ(::waitpid(pid1, &status, 0), pid1);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_TRUE(fs::exists(run_dir("events1") / "checkpoints" / "step-000000000015.ckpt"));
  EXPECT_TRUE(fs::exists(run_dir("events1") / "checkpoints" / ".step-000000000017.ckpt.tmp"));
  expect_same_as_uninterrupted(every1, "events1");
}

TEST_F(SimResume, KilledAtARandomStepResumesBitwise) {
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  for (const char* algorithm :
       {"diloco", "ddp", "streaming_diloco", "demo", "dipaco", "diloco_delayed", "diloco_eager", "diloco_events", "fedavg",
        "fedavg_kill", "async_local_sgd", "async_naive"}) {
    SCOPED_TRACE(algorithm);
    const std::string cfg = config(algorithm, 150);
    const std::string name = std::string("kill_") + algorithm;
    const pid_t pid = start(cfg, name);
    // Wait for a random number of train records (log_every 3) and the first checkpoint (a run
    // killed before it has nothing to resume from: refused, RefusalsAreOneLine; fedavg's first
    // cut, server round 5, comes after more records than the others' step 5), then kill.
    const int records = std::uniform_int_distribution<int>(6, 90)(rng);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto has_checkpoint = [&] {
      std::error_code ec;
      for (const auto& f : fs::directory_iterator(run_dir(name) / "checkpoints", ec))
        if (f.path().extension() == ".ckpt") return true;
      return false;
    };
    bool ended = false;  // finished first: resuming then redoes the tail after its last checkpoint
    while (!ended &&
           (count(slurp(run_dir(name) / "metrics.jsonl"), "\"event\":\"train\"") < records || !has_checkpoint()) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ended = ::waitpid(pid, nullptr, WNOHANG) == pid;
    }
    if (!ended) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::printf("[ info ] %s killed after %d train records\n", algorithm, records);
    expect_same_as_uninterrupted(cfg, name);
  }
}

TEST_F(SimResume, ExportWritesWhatTorchLoads) {
  const std::string cfg = config("diloco", 20);
  ASSERT_EQ(simulate(cfg, "e"), "");
  atl::core::ExportOptions o;
  o.run_dir = run_dir("e").string();
  atl::core::ExportResult r = atl::core::export_params(o);
  EXPECT_EQ(r.out, (run_dir("e") / "final_params.pt").string());
  EXPECT_TRUE(fs::exists(r.out));
  EXPECT_GT(r.tensors, 3);
  o.checkpoint = (run_dir("e") / "checkpoints" / "step-000000000015.ckpt").string();
  r = atl::core::export_params(o);
  EXPECT_EQ(r.out, (run_dir("e") / "step-15.pt").string());
  EXPECT_TRUE(fs::exists(r.out));
  o.format = "npz";
  EXPECT_THROW(atl::core::export_params(o), atl::UserError);
  // Debian's python3-torch is under /usr/bin/python3 (a python3 earlier on PATH may lack it).
  std::string python;
  for (const char* candidate : {"/usr/bin/python3", "python3"}) {
    if (std::system((std::string(candidate) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty())
    GTEST_SKIP() << "python3-torch is not installed (apt-get install python3-torch): torch.load not tried";
  // torch.load gives a dict of named tensors whose concatenation is final_params.bin.
  const std::string script =
      "import sys, struct, torch\n"
      "d = torch.load(sys.argv[1])\n"
      "assert isinstance(d, dict) and len(d) > 3, type(d)\n"
      "assert 'blocks.0.attn.qkv.weight' in d or any(k.startswith('blocks.0') for k in d), list(d)\n"
      "flat = torch.cat([t.reshape(-1) for t in d.values()])\n"
      "raw = open(sys.argv[2], 'rb').read()\n"
      "n = struct.unpack('<Q', raw[8:16])[0]\n"
      "ref = torch.frombuffer(bytearray(raw[16:16 + 4 * n]), dtype=torch.float32)\n"
      "assert flat.dtype == torch.float32 and torch.equal(flat, ref), 'values differ'\n"
      "print('ok', len(d), n)\n";
  std::ofstream(dir_ / "load.py") << script;
  const std::string cmd = python + " " + (dir_ / "load.py").string() + " " + (run_dir("e") / "final_params.pt").string() +
                          " " + (run_dir("e") / "final_params.bin").string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_EQ(out.rfind("ok ", 0), 0u) << out;
}

TEST_F(SimResume, RefusalsAreOneLine) {
  const std::string cfg = config("diloco", 20);
  // Nothing to resume from: checkpoints off.
  std::string e = simulate(cfg, "x", {"checkpoint.every=0", "run.resume=true"});
  EXPECT_NE(e.find("run.resume"), std::string::npos) << e;
  // A setup whose state is not saved: DiPaCo's re-sharding (every algorithm is saved now:
  // async_local_sgd, the last one, in SimResume.*Resumes* with async_local_sgd and async_naive).
  e = simulate(config("dipaco", 20), "x", {"dipaco.routing=kmeans", "dipaco.prefix=8", "dipaco.reshard_at=8"});
  EXPECT_NE(e.find("dipaco.reshard_at"), std::string::npos) << e;
  EXPECT_NE(e.find("checkpoint"), std::string::npos) << e;
  e = simulate(config("async_local_sgd", 12), "as");
  EXPECT_EQ(e, "");
  // fedavg is saved now (cut at server rounds: SimResume.*Resumes* with fedavg), and so are
  // its deadline and min_clients.
  e = simulate(cfg, "fa", {"algorithm={name: fedavg}", "algorithm.rounds=4", "algorithm.local_steps=5",
                           "algorithm.round_timeout_s=0.5", "algorithm.min_clients=2",
                           "algorithm.client_fraction=1"});
  EXPECT_EQ(e, "");
  // (kill, rejoin and add events are saved: SimResume.RunWithKillRejoinAndAddEventsResumesBitwise.)
  // Real runs checkpoint every algorithm but async_local_sgd (its cut is in virtual time),
  // fedavg and diloco with overlap included (tests/run/resume_test.cpp); it is refused at
  // checkpoint.every.
  atl::config::Config real = atl::config::load_config(cfg, {"algorithm.name=async_local_sgd"});
  try {
    atl::core::validate_config(real, atl::core::Target::kLaunch);
    ADD_FAILURE() << "launch with checkpoint.every and async_local_sgd's server role accepted";
  } catch (const atl::UserError& u) {
    EXPECT_NE(std::string(u.what()).find("checkpoint.every"), std::string::npos) << u.what();
    EXPECT_NE(std::string(u.what()).find("checkpoint every algorithm but async_local_sgd, not async_local_sgd"),
              std::string::npos)
        << u.what();
  }
  EXPECT_NO_THROW(atl::core::validate_config(atl::config::load_config(cfg), atl::core::Target::kLaunch));
  EXPECT_NO_THROW(atl::core::validate_config(atl::config::load_config(cfg, {"algorithm.overlap=delayed"}),
                                             atl::core::Target::kLaunch));
  // A resume with another config.
  ASSERT_EQ(simulate(cfg, "c"), "");
  e = simulate(cfg, "c", {"train.lr=0.01", "run.resume=true"});
  EXPECT_NE(e.find("another config"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // Every checkpoint damaged: refused (each with a warning line), then no usable one.
  for (const auto& f : fs::directory_iterator(run_dir("c") / "checkpoints")) std::ofstream(f.path()) << "junk";
  e = simulate(cfg, "c", {"run.resume=true"});
  EXPECT_NE(e.find("no usable checkpoint"), std::string::npos) << e;
  // run.resume for a run directory that does not exist yet: a fresh start.
  EXPECT_EQ(simulate(cfg, "fresh", {"run.resume=true"}), "");
  EXPECT_TRUE(fs::exists(run_dir("fresh") / "final_params.bin"));
}

}  // namespace
