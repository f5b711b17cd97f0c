// The table of configs atoll must refuse, each run through every command that takes a
// config: the real binary, as a user runs it. A refused config gives exit code 2 and one
// line, "atoll: error: FILE:LINE: key 'KEY': MESSAGE", the same line from every command
// (a sweep prefixes it with the run it belongs to and names the sweep file).
//
// Where commands legitimately differ, the row says so: `atoll validate` checks what
// `atoll simulate` needs (it has no mode), and the sweep planner does the same since sweeps
// run `simulate`; real runs (`launch`, `island`, `coordinator`) refuse a few settings more:
// islands.events kills, rejoins and additions, which only the simulator applies, and
// transport settings that only one transport supports. Such a row expects validate to
// accept and every real-run command to refuse with the same line.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli_test_util.h"

namespace fs = std::filesystem;

namespace {

using atl::testing::Result;
using atl::testing::run;

enum class Who {
  kAll,       // validate, simulate, sweep, launch, island and coordinator refuse
  kRealOnly,  // validate accepts (so simulate would run); launch, island, coordinator refuse
};

struct Row {
  std::string name;
  std::string yaml;     // the whole config; DIR stands for the test's directory
  std::string key;      // the key the line names
  std::string message;  // a part of the message
  std::string mark;     // text on the line the error points at ("" = no line: the file only)
  Who who = Who::kAll;
  // false: commands may word the message differently (the line still starts with the same
  // place and key and holds `message`): the memory estimate counts what each process holds.
  bool same_line = true;
};

// A tiny classification run (no data files): what each row changes is spelled out.
std::string synthetic(const std::string& model = "{name: mlp, hidden: [8]}",
                      const std::string& algorithm = "{name: diloco, inner_steps: 2}",
                      const std::string& islands = "{count: 2}", const std::string& extra = "") {
  return "run: {name: refusal, threads: 1, out_dir: DIR/runs}\n"
         "model: " + model + "\n"
         "data: {kind: synthetic, synthetic_examples: 64, synthetic_dim: 4, synthetic_classes: 2}\n"
         "train: {steps: 4, batch_size: 4, warmup_steps: 0, eval_every: 0}\n"
         "islands: " + islands + "\n"
         "algorithm: " + algorithm + "\n" + extra;
}

// A tiny language model on DIR/corpus.txt (byte-level text: 256 tokens).
std::string text(const std::string& model, const std::string& algorithm, const std::string& extra = "",
                 const std::string& partition = "iid", const std::string& islands = "{count: 2}") {
  return "run: {name: refusal, threads: 1, out_dir: DIR/runs}\n"
         "model: " + model + "\n"
         "data: {kind: text, path: DIR/corpus.txt, partition: " + partition + "}\n"
         "train: {steps: 4, batch_size: 2, warmup_steps: 0, eval_every: 0}\n"
         "islands: " + islands + "\n"
         "algorithm: " + algorithm + "\n" + extra;
}

const std::string kGpt = "{name: gpt, layers: 2, heads: 2, dim: 16, seq_len: 16, vocab: 256}";

std::vector<Row> rows() {
  std::vector<Row> r = {
      {"unknown algorithm lists the valid names", synthetic("{name: mlp, hidden: [8]}", "{name: dilogo}"),
       "algorithm.name", "unknown algorithm 'dilogo' (valid: ddp, diloco, fedavg, streaming_diloco, async_local_sgd, demo, dipaco, sparseloco)",
       "algorithm:"},
      {"demo refuses a sparsify stage for its values", synthetic("{name: mlp, hidden: [8]}", "{name: demo}", "{count: 2}",
                                                                 "compression:\n  - {topk: 0.1}\n"),
       "compression", "stage 'topk' does not apply to demo", "compression:"},
      {"unknown codec stage", synthetic() + "compression:\n  - {quantise: int8}\n", "compression[0]",
       "a stage needs one of dct, topk, randk, quantize, zstd (did you mean 'quantize'?)", "quantise"},
      {"codec stages out of order", synthetic() + "compression:\n  - {zstd: 3}\n  - {quantize: int8}\n",
       "compression", "", "compression:"},
      {"a key of another algorithm", synthetic("{name: mlp, hidden: [8]}", "{name: diloco, topk: 8}"),
       "algorithm.topk",
       "is not a key of algorithm 'diloco' (its keys: name, inner_steps, outer_optimizer, outer_lr, outer_momentum, "
       "outer_beta1, outer_beta2, outer_eps, weighting, error_feedback, overlap)",
       "algorithm:"},
      {"an outer learning rate for demo", synthetic("{name: mlp, hidden: [8]}", "{name: demo, outer_lr: 0.7}"),
       "algorithm.outer_lr", "is not a key of algorithm 'demo' (its keys: name, topk, chunk, decay)", "algorithm:"},
      {"out-of-range option", synthetic("{name: mlp, hidden: [8]}", "{name: diloco, outer_lr: -1}"),
       "algorithm.outer_lr", "must be > 0 (got -1)", "algorithm:"},
      {"out-of-range network option", synthetic("{name: mlp, hidden: [8]}", "{name: diloco}", "{count: 2}",
                                                    "network: {loss: 1.5}\n"),
       "network.loss", "must be in [0, 1) (got 1.5)", "network:"},
      {"fedavg with add events",
       synthetic("{name: mlp, hidden: [8]}", "{name: fedavg, local_steps: 2, client_fraction: 1}",
                 "{count: 2, events: [{add: 1, at_time_s: 5}]}"),
       "islands.events[0]", "rejoin and add events are not available with fedavg", "islands:"},
      {"fedavg with more min_clients than clients per round",
       synthetic("{name: mlp, hidden: [8]}", "{name: fedavg, local_steps: 2, client_fraction: 0.5, min_clients: 2}",
                 "{count: 2}"),
       "algorithm.min_clients", "2 is more than the clients selected per round (1 = max(floor(client_fraction x 2",
       "algorithm:"},
      {"fedavg with local_epochs but no rounds", synthetic("{name: mlp, hidden: [8]}", "{name: fedavg}"),
       "algorithm.rounds", "fedavg with local_epochs needs algorithm.rounds", "algorithm:"},
      {"more streaming fragments than transformer blocks",
       text(kGpt, "{name: streaming_diloco, inner_steps: 10, fragments: 3, overlap_steps: 0}"),
       "algorithm.fragments", "3 fragments but model gpt has 2 transformer blocks", "algorithm:"},
      {"more streaming fragments than inner steps",
       text("{name: gpt, layers: 4, heads: 2, dim: 16, seq_len: 16}",
            "{name: streaming_diloco, inner_steps: 3, fragments: 4, overlap_steps: 0}"),
       "algorithm.fragments", "4 fragments must not exceed algorithm.inner_steps (3)", "algorithm:"},
      {"streaming overlap longer than a fragment's gap",
       text(kGpt, "{name: streaming_diloco, inner_steps: 10, fragments: 2, overlap_steps: 5}"),
       "algorithm.overlap_steps", "must be smaller than the steps between two fragment syncs (5", "algorithm:"},
      {"delayed nesterov activation above 1/N",
       synthetic("{name: mlp, hidden: [8]}", "{name: async_local_sgd, dn_c: 0.9}"), "algorithm.dn_c",
       "must be in [0, 1/N] with N = buffer_size = 2", "algorithm:"},
      {"gpt vocabulary smaller than the data's", text("{name: gpt, layers: 1, heads: 2, dim: 16, seq_len: 16, vocab: 64}",
                                                     "{name: diloco, inner_steps: 2}"),
       "model.vocab", "is 64 but the data set has 256 tokens", "model:"},
      {"a label partition of language-model data",
       text(kGpt, "{name: diloco, inner_steps: 2}", "", "dirichlet"),
       "data.partition", "dirichlet needs labels (classification data); use iid or contiguous for language models",
       "data:"},
      {"mlp on text without an input size", text("{name: mlp, hidden: [8]}", "{name: diloco, inner_steps: 2}"),
       "model.input_dim", "is unknown: set model.input_dim or use a classification data set", "model:"},
      {"a model that cannot fit in memory",
       text("{name: gpt, layers: 64, heads: 8, dim: 65536, seq_len: 16}", "{name: diloco, inner_steps: 2}"),
       "model.layers", "the model does not fit in memory: at least", "model:", Who::kAll, false},
      {"kill events in a real run", synthetic("{name: mlp, hidden: [8]}", "{name: diloco, inner_steps: 2}",
                                              "{count: 2, events: [{kill: 1, at_step: 2}]}"),
       "islands.events[0]", "kill, rejoin and add events are applied by atoll simulate only", "islands:",
       Who::kRealOnly},
      {"islands added to a dipaco run with fewer islands than paths",
       text(kGpt, "{name: dipaco, inner_steps: 2}",
            "dipaco: {levels: [{blocks: [0], modules: 2}, {blocks: [1], modules: 2}], prefix: 8}\n", "iid",
            "{count: 2, events: [{add: 1, at_time_s: 1}]}"),
       "islands.events", "adds islands to a DiPaCo run with fewer islands (2) than paths (4)", "islands:"},
      {"a dipaco routing prefix longer than a sequence",
       text(kGpt, "{name: dipaco, inner_steps: 2}", "dipaco: {levels: [{blocks: [0], modules: 2}], prefix: 17}\n"),
       "dipaco.prefix", "17 tokens, longer than model.seq_len (16)", "dipaco:"},
      {"dipaco levels that share a block",
       text(kGpt, "{name: dipaco, inner_steps: 2}",
            "dipaco: {levels: [{blocks: [0, 1], modules: 2}, {blocks: [1], modules: 1}], prefix: 8}\n"),
       "dipaco.levels", "level 1: block 1 is already in level 0", "dipaco:"},
      {"a loss window longer than a sequence",
       text(kGpt, "{name: diloco, inner_steps: 2}", "", "iid, loss_after: 17"),
       "data.loss_after", "17 tokens, longer than model.seq_len (16)", "data:"},
      {"dipaco re-sharding off an outer-round boundary",
       text(kGpt, "{name: dipaco, inner_steps: 2}", "dipaco: {levels: [{blocks: [0], modules: 2}], prefix: 8, reshard_at: 3}\n"),
       "dipaco.reshard_at", "must be an outer-round boundary", "dipaco:"},
      {"dipaco on a model without blocks",
       synthetic("{name: mlp, hidden: [8]}", "{name: dipaco, inner_steps: 2}", "{count: 2}",
                 "dipaco: {levels: [{blocks: [0], modules: 2}], routing: none}\n"),
       "model.name", "algorithm dipaco needs a model with transformer blocks (gpt), got mlp", "algorithm:"},
      {"a dipaco section with another algorithm",
       text(kGpt, "{name: diloco, inner_steps: 2}", "dipaco: {levels: [{blocks: [0], modules: 2}]}\n"),
       "dipaco.levels", "set, but algorithm.name is diloco", "dipaco:"},
      {"islands of no rank", synthetic("{name: mlp, hidden: [8]}", "{name: diloco, inner_steps: 2}", "{count: 2, ranks: 0}"),
       "islands.ranks", "must be >= 1 (got 0)", "islands:"},
      {"more ranks than the batch allows",
       synthetic("{name: mlp, hidden: [8]}", "{name: diloco, inner_steps: 2}", "{count: 2, ranks: [1, 3]}"),
       "islands.ranks", "3 ranks do not divide train.batch_size (4)", "islands:"},
      {"ranks for fewer islands than the run has",
       synthetic("{name: mlp, hidden: [8]}", "{name: diloco, inner_steps: 2}", "{count: 3, ranks: [2, 2]}"),
       "islands.ranks", "has 2 entries but islands.count is 3", "islands:"},
      {"a sharded exchange with one rank", synthetic("{name: mlp, hidden: [8]}", "{name: diloco, inner_steps: 2}",
                                                       "{count: 2, shard_exchange: true}"),
       "islands.shard_exchange", "set islands.ranks > 1", "islands:"},
      {"a sharded exchange over islands of different ranks",
       synthetic("{name: mlp, hidden: [8]}", "{name: diloco, inner_steps: 2}", "{count: 2, ranks: [2, 4], shard_exchange: true}"),
       "islands.shard_exchange", "needs the same islands.ranks for every island", "islands:"},
      {"a sharded exchange of a server-role algorithm",
       synthetic("{name: mlp, hidden: [8]}", "{name: fedavg, local_steps: 2, client_fraction: 1}",
                 "{count: 2, ranks: 2, shard_exchange: true}"),
       "islands.shard_exchange", "fedavg talks to its server from rank 0 alone", "islands:"},
      {"gloo with curve in a real run", synthetic() + "transport: {kind: gloo, curve: true}\n", "transport.curve",
       "not available with transport.kind gloo", "transport:", Who::kRealOnly},
  };
  // run.device is a key of run:, so these rows replace the run line.
  auto device_row = [](const std::string& name, const std::string& device, const std::string& message) {
    std::string y = synthetic();
    y.replace(0, y.find('\n'), "run: {name: refusal, threads: 1, out_dir: DIR/runs, device: \"" + device + "\"}");
    return Row{name, y, "run.device", message, "run:"};
  };
  r.push_back(device_row("a device that is not one", "gpu", "'gpu' is not a device atoll can use"));
  r.push_back(device_row("a cuda device this machine does not have", "cuda:63", "'cuda:63'"));
  if (!torch::cuda::is_available())  // the case: libtorch without CUDA
    r.push_back(device_row("cuda without CUDA", "cuda", "'cuda' needs CUDA"));
  return r;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class Refusal : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atoll_refusal_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << std::string(20000, 'a');
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Runs every (command, arguments) of `jobs` on a few threads: each is a process of its own.
std::vector<Result> run_all(const std::vector<std::string>& jobs) {
  std::vector<Result> results(jobs.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      for (size_t j = next++; j < jobs.size(); j = next++) results[j] = run(jobs[j]);
    });
  }
  for (auto& t : workers) t.join();
  return results;
}

TEST_F(Refusal, EveryCommandRefusesWithTheSameLine) {
  struct Case {
    Row row;
    std::string path, sweep, expected;  // config, sweep file, "atoll: error: FILE:LINE: key 'K': "
    std::vector<std::string> commands;   // what each job runs
    std::vector<size_t> jobs;            // their indices in `all`
  };
  std::vector<Case> cases;
  std::vector<std::string> all;
  for (const Row& row : rows()) {
    Case c{row, {}, {}, {}, {}, {}};
    const std::string n = std::to_string(cases.size());
    const std::string yaml = replace_all(row.yaml, "DIR", dir_.string());
    c.path = (dir_ / ("c" + n + ".yaml")).string();
    c.sweep = (dir_ / ("s" + n + ".yaml")).string();
    std::ofstream(c.path) << yaml;
    std::ofstream(c.sweep) << yaml << "sweep:\n  name: s" << n << "\n";
    // FILE:LINE of the key: the first line holding the row's mark.
    std::string where = c.path;
    if (!row.mark.empty()) {
      const size_t at = yaml.find(row.mark);
      ASSERT_NE(at, std::string::npos) << row.mark;
      where += ":" + std::to_string(count_lines(yaml.substr(0, at)) + 1);
    }
    c.expected = "atoll: error: " + where + ": key '" + row.key + "': ";
    c.commands = {"validate " + c.path};
    if (row.who == Who::kAll) {
      c.commands.push_back("simulate " + c.path);
      c.commands.push_back("sweep " + c.sweep + " --out " + (dir_ / "sweeps").string());
    }
    c.commands.push_back("launch " + c.path);
    c.commands.push_back("island " + c.path + " --id 0");
    c.commands.push_back("coordinator " + c.path);
    for (const auto& command : c.commands) {
      c.jobs.push_back(all.size());
      all.push_back(command);
    }
    cases.push_back(std::move(c));
  }
  const std::vector<Result> results = run_all(all);

  for (const Case& c : cases) {
    SCOPED_TRACE(c.row.name);
    std::string line;  // the first refusing command's; every other one gives the same
    for (size_t k = 0; k < c.commands.size(); ++k) {
      const std::string& command = c.commands[k];
      const Result& r = results[c.jobs[k]];
      SCOPED_TRACE(command);
      if (c.row.who == Who::kRealOnly && k == 0) {
        EXPECT_EQ(r.code, 0) << "validate checks what simulate needs: " << r.output;
        continue;
      }
      EXPECT_EQ(r.code, 2) << r.output;
      EXPECT_EQ(count_lines(r.output), 1) << r.output;
      EXPECT_NE(r.output.find(c.row.message), std::string::npos) << c.row.message << "\n" << r.output;
      if (command.rfind("sweep ", 0) == 0) {
        // The same line about the sweep file (whose first lines are the config's), after
        // the run it belongs to when the error is in one run's resolved config.
        const std::string tail = replace_all(line, "atoll: error: " + c.path, c.sweep);
        EXPECT_EQ(r.output.rfind("atoll: error: ", 0), 0u) << r.output;
        EXPECT_TRUE(r.output.ends_with(tail)) << "expected it to end with: " << tail << r.output;
        continue;
      }
      EXPECT_EQ(r.output.rfind(c.expected, 0), 0u) << "expected it to start with: " << c.expected << "\n" << r.output;
      if (line.empty()) line = r.output;
      if (c.row.same_line) {
        EXPECT_EQ(r.output, line);
      }
    }
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "a refused config started a run";
  EXPECT_FALSE(fs::exists(dir_ / "sweeps")) << "a refused sweep started something";
  EXPECT_GE(cases.size(), 18u);
}

// launch with a hosts: section only prints (or starts over ssh) processes of other machines:
// each of them checks its own device when it starts, so launch does not refuse a device this
// machine lacks, while the island process on a machine without CUDA does.
TEST_F(Refusal, LaunchOnHostsLeavesTheDeviceCheckToEachProcess) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has CUDA";
  std::string yaml = synthetic();
  yaml.replace(0, yaml.find('\n'), "run: {name: refusal, threads: 1, out_dir: DIR/runs, device: cuda}");
  yaml = replace_all(yaml, "DIR", dir_.string()) + "hosts: {coordinator: gpu0, islands: [gpu1, gpu2]}\n"
                                                  "transport: {coordinator: \"tcp://gpu0:29500\"}\n";
  const std::string path = (dir_ / "hosts.yaml").string();
  std::ofstream(path) << yaml;
  Result launch = run("launch " + path);
  EXPECT_EQ(launch.code, 0) << launch.output;
  EXPECT_NE(launch.output.find("ssh gpu1"), std::string::npos) << launch.output;
  Result island = run("island " + path + " --id 0");
  EXPECT_EQ(island.code, 2) << island.output;
  EXPECT_EQ(island.output, "atoll: error: " + path + ":1: key 'run.device': 'cuda' needs CUDA, but this atoll's "
                                                     "libtorch was built without CUDA (use cpu)\n");
}

}  // namespace
