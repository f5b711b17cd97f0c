// DiPaCo's routed evaluation and per-path outputs (docs/dipaco.md "Routed evaluation",
// "Outputs"), end to end in the simulator on a tiny GPT and a corpus of two kinds of text:
//   - the routed validation loss equals an oracle computed here, independently: each
//     validation sequence of the evaluation scored by its path's final parameters on the
//     tokens after the prefix only, token-weighted over all of them;
//   - every eval step has one record per path and one routed record, also when a path's
//     evaluating island is killed (a survivor of the path takes over);
//   - data.loss_after gives a dense run the same loss window.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "src/config/config.h"
#include "src/core/eval_summary.h"
#include "src/core/export.h"
#include "src/core/island_parts.h"
#include "src/core/json.h"
#include "src/core/params_file.h"
#include "src/core/simulator.h"
#include "src/dipaco/run/reshard.h"
#include "transport/inproc/inproc_group.h"
#include "transport/inproc/scheduler.h"
#include "src/models/gpt.h"

namespace fs = std::filesystem;

namespace atl::core {
namespace {

struct TempDir {
  TempDir() {
    path = fs::temp_directory_path() / ("atoll_dipaco_eval_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
  static inline int counter = 0;
};

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two kinds of text in two halves, so that k-means routing has something to find and the two
// paths learn different things.
config::Config two_kinds_config(const fs::path& dir, const std::string& extra = "") {
  std::ofstream(dir / "corpus.txt") << [] {
    std::string s;
    for (int i = 0; i < 350; ++i) s += "abc abd abe " + std::to_string(i % 7) + "\n";
    for (int i = 0; i < 350; ++i) s += "XYZ XWV XQR " + std::to_string(i % 5) + "\n";
    return s;
  }();
  std::ostringstream y;
  y << "run: {name: t, seed: 5, out_dir: " << (dir / "runs").string() << ", threads: 1}\n"
    << "model: {name: gpt, layers: 2, heads: 2, dim: 16, seq_len: 16}\n"
    << "data: {kind: text, path: " << (dir / "corpus.txt").string() << ", val_fraction: 0.2}\n"
    << "train: {lr: 0.003, warmup_steps: 2, batch_size: 8, steps: 12, eval_every: 4, eval_batches: 0, log_every: 4}\n"
    << "islands: {count: 4}\n"
    << "algorithm: {name: dipaco, inner_steps: 4}\n"
    << "dipaco: {levels: [{blocks: [0, 1], modules: 2}], prefix: 6}\n"
    << extra;
  return config::parse_config(y.str(), (dir / "tiny.yaml").string());
}

// The oracle: sum and count of the per-token cross-entropy of `params` on validation sequences
// `rows`, targets from position prefix - 1 on (the tokens after the first `prefix`), computed
// one sequence at a time with log_softmax in double.
std::pair<double, int64_t> oracle_loss(const config::Config& c, const RunData& d, const at::Tensor& params,
                                       const std::vector<int64_t>& rows, int prefix,
                                       const data::Dataset* split = nullptr) {  // null: validation
  models::Gpt gpt(c.model, c10::Device(c10::kCPU), c.run.seed);
  at::NoGradGuard no_grad;
  gpt.params().copy_(params);
  gpt.set_training(false);
  double sum = 0;
  int64_t count = 0;
  for (int64_t e : rows) {
    const data::Batch b = (split != nullptr ? *split : *d.splits.val).gather({e});
    const at::Tensor logp = at::log_softmax(gpt.logits(b.input).to(at::kDouble), -1)[0];  // [T, V]
    const at::Tensor target = b.target[0];
    for (int64_t t = prefix - 1; t < target.size(0); ++t) {
      sum -= logp[t][target[t].item<int64_t>()].item<double>();
      ++count;
    }
  }
  return {sum, count};
}

TEST(DiPaCoEval, RoutedLossMatchesAnOracleOnTheTokensAfterThePrefix) {
  TempDir tmp;
  const config::Config c = two_kinds_config(tmp.path);
  const RunSummary s = simulate(c, {false, true});
  const fs::path run = tmp.path / "runs/t";

  // The oracle routes by the run's own router (RunData: the same in every process), and
  // scores each path's sequences with that path's final parameters.
  const RunData d = load_run_data(c);
  ASSERT_EQ(d.paths, 2);
  EXPECT_EQ(d.loss_after, 6) << "data.loss_after defaults to dipaco.prefix";
  const auto order = data::validation_indices(*d.splits.val, c.train.batch_size, 0, c.run.seed);
  std::vector<std::vector<int64_t>> rows(2);
  for (int64_t e : order) rows[static_cast<size_t>(d.val_path[static_cast<size_t>(e)])].push_back(e);
  ASSERT_FALSE(rows[0].empty());
  ASSERT_FALSE(rows[1].empty());
  double sum = 0;
  int64_t count = 0;
  std::vector<double> path_loss;
  for (int p = 0; p < 2; ++p) {
    StatusOr<at::Tensor> params = read_params((run / final_params_name(p)).string());
    ASSERT_TRUE(params.is_ok()) << params.status().to_string();
    const auto [ps, pc] = oracle_loss(c, d, *params, rows[static_cast<size_t>(p)], 6);
    EXPECT_EQ(pc, static_cast<int64_t>(rows[static_cast<size_t>(p)].size()) * (c.model.seq_len - 5));
    path_loss.push_back(ps / static_cast<double>(pc));
    sum += ps;
    count += pc;
  }
  const double routed = sum / static_cast<double>(count);
  EXPECT_NEAR(s.final_val_loss, routed, 1e-5 * routed);
  EXPECT_GT(std::abs(path_loss[0] - path_loss[1]), 1e-3) << "the two paths ended alike";

  // The last routed eval record and summary.json say the same, with the per-path values.
  std::string last;
  for (const auto& l : lines_of(run / "metrics.jsonl"))
    if (json_find_string(l, "event") == "eval") last = l;
  ASSERT_FALSE(last.empty());
  EXPECT_EQ(json_find_number(last, "step").value_or(-1), 12);
  EXPECT_EQ(json_find_number(last, "tokens").value_or(-1), static_cast<double>(count));
  const std::string summary = read(run / "summary.json");
  for (const std::string& doc : {last, summary}) {
    EXPECT_NE(doc.find("\"path_val_losses\":["), std::string::npos) << doc;
    const std::string train_sizes = "\"path_train_sequences\":[" + std::to_string(d.path_train_sizes[0]) + "," +
                                    std::to_string(d.path_train_sizes[1]) + "]";
    EXPECT_NE(doc.find(train_sizes), std::string::npos) << train_sizes << " not in " << doc;
    const std::string val_sizes = "\"path_sequences\":[" + std::to_string(rows[0].size()) + "," +
                                  std::to_string(rows[1].size()) + "]";
    EXPECT_NE(doc.find(val_sizes), std::string::npos) << val_sizes << " not in " << doc;
  }
  const size_t at = last.find("\"path_val_losses\":[");
  ASSERT_NE(at, std::string::npos);
  const double first_path = std::stod(last.substr(at + 19));
  EXPECT_NEAR(first_path, path_loss[0], 1e-5 * path_loss[0]);

  // Every path wrote its final parameters; final_params.bin is path 0's (island 0's).
  EXPECT_EQ(read(run / "final_params.bin"), read(run / final_params_name(0)));
  EXPECT_NE(read(run / final_params_name(0)), read(run / final_params_name(1)));

  // `atoll export --path 1`: path 1's parameters by name, as torch.load reads them.
  ExportOptions eo;
  eo.run_dir = run.string();
  eo.path = 1;
  const ExportResult er = export_params(eo);
  EXPECT_EQ(er.out, (run / "final_params.path1.pt").string());
  EXPECT_EQ(er.source, (run / final_params_name(1)).string());
  const std::string pickled = read(er.out);
  const c10::IValue loaded = torch::pickle_load(std::vector<char>(pickled.begin(), pickled.end()));
  const auto dict = loaded.toGenericDict();
  StatusOr<at::Tensor> path1 = read_params((run / final_params_name(1)).string());
  ASSERT_TRUE(path1.is_ok());
  auto model = models::make_model(c.model, d.shape, c10::Device(c10::kCPU), c.run.seed);
  ASSERT_EQ(static_cast<int64_t>(dict.size()), er.tensors);
  for (const auto& slice : model->layout()) {
    const at::Tensor t = dict.at(slice.name).toTensor().reshape({-1});
    EXPECT_TRUE(at::equal(t, path1->slice(0, slice.offset, slice.offset + slice.numel))) << slice.name;
  }
  eo.path = 5;  // no such path: one line naming the file
  try {
    export_params(eo);
    FAIL() << "export --path 5 of a 2-path run succeeded";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("final_params.path5.bin"), std::string::npos) << e.what();
  }
}

TEST(DiPaCoEval, AKilledEvaluatorsPathIsEvaluatedByASurvivorOfThePath) {
  TempDir tmp;
  const config::Config c = two_kinds_config(tmp.path, "");
  config::Config k = c;
  k.islands.events = config::parse_config("islands:\n  count: 4\n  events:\n    - {kill: 0, at_step: 5}\n", "e.yaml")
                         .islands.events;
  simulate(k, {false, true});
  std::map<int64_t, int> routed;                   // step -> routed eval records
  std::map<std::pair<int64_t, int>, int> by_path;  // (step, path) -> path_eval records
  std::map<std::pair<int64_t, int>, int> island_of;
  for (const auto& l : lines_of(tmp.path / "runs/t/metrics.jsonl")) {
    const auto event = json_find_string(l, "event");
    const auto step = static_cast<int64_t>(json_find_number(l, "step").value_or(-1));
    if (event == "eval") {
      ++routed[step];
      EXPECT_TRUE(std::isfinite(json_find_number(l, "val_loss").value_or(NAN))) << l;
    }
    if (event == "path_eval") {
      const int p = static_cast<int>(json_find_number(l, "path").value_or(-1));
      ++by_path[{step, p}];
      island_of[{step, p}] = static_cast<int>(json_find_number(l, "island").value_or(-1));
    }
  }
  for (int64_t step : {0, 4, 8, 12}) {
    EXPECT_EQ(routed[step], 1) << "step " << step;
    for (int p = 0; p < 2; ++p) EXPECT_EQ((by_path[{step, p}]), 1) << "step " << step << " path " << p;
    EXPECT_EQ((island_of[{step, 1}]), 1) << "path 1's lead is island 1";
  }
  EXPECT_EQ((island_of[{0, 0}]), 0);
  EXPECT_EQ((island_of[{4, 0}]), 0);
  EXPECT_EQ((island_of[{8, 0}]), 2) << "island 2, path 0's survivor, evaluates it after island 0 died";
  EXPECT_EQ((island_of[{12, 0}]), 2);
  // The survivor's path parameters are path 0's final ones.
  EXPECT_TRUE(fs::exists(tmp.path / "runs/t" / final_params_name(0)));
  EXPECT_TRUE(fs::exists(tmp.path / "runs/t" / final_params_name(1)));
}

// A rejoiner takes its own path's state: island 1 (path 1) dies and rejoins, and its donor is
// island 3, path 1's survivor, not island 0, the lowest live island (core::Roles::donor, the
// rule real runs apply too).
TEST(DiPaCoEval, ARejoinerTakesItsPathsStateFromAnIslandOnThatPath) {
  TempDir tmp;
  config::Config c = two_kinds_config(tmp.path, "");
  c.compute.step_time_s = 0.1;
  c.islands.events = config::parse_config(
                         "islands:\n  count: 4\n  events:\n    - {kill: 1, at_step: 3}\n"
                         "    - {rejoin: 1, at_time_s: 0.55}\n",
                         "e.yaml")
                         .islands.events;
  simulate(c, {false, true});
  int rejoins = 0;
  for (const auto& l : lines_of(tmp.path / "runs/t/metrics.jsonl")) {
    if (json_find_string(l, "event") != "rejoin") continue;
    ++rejoins;
    EXPECT_EQ(json_find_number(l, "island"), 1) << l;
    EXPECT_EQ(json_find_number(l, "donor"), 3) << "path 1's survivor hands path 1's state over: " << l;
  }
  EXPECT_EQ(rejoins, 1);
  for (int p = 0; p < 2; ++p) EXPECT_TRUE(fs::exists(tmp.path / "runs/t" / final_params_name(p)));
}

// Fewer islands than paths: a 2x2 (one block per level) on 2 islands, which take the four
// paths in turn (island i: paths i, i + 2, i in rounds 0, 1, 2; docs/dipaco.md "Fewer islands
// than paths").
config::Config rotation_config(const fs::path& dir) {
  config::Config c = two_kinds_config(dir);
  c.islands.count = 2;
  c.dipaco.levels = {{{0}, 2}, {{1}, 2}};
  return c;
}

// Every island keeps every module's global parameters, so the lead composes each path's model
// and evaluates it on that path's routed sequences. The oracle, as above: every path's final
// parameters scored on its sequences. Those files are the islands' own models where an island
// ends on the path (island i's last task is path i: its island_end hash), and paths share the
// slices of the modules they share; `atoll export --path` reads them.
TEST(DiPaCoEval, FewerIslandsThanPathsRoutedLossMatchesAnOracle) {
  TempDir tmp;
  const config::Config c = rotation_config(tmp.path);
  const RunSummary s = simulate(c, {false, true});
  const fs::path run = tmp.path / "runs/t";
  const RunData d = load_run_data(c);
  ASSERT_EQ(d.paths, 4);
  const auto order = data::validation_indices(*d.splits.val, c.train.batch_size, 0, c.run.seed);
  std::vector<std::vector<int64_t>> rows(4);
  for (int64_t e : order) rows[static_cast<size_t>(d.val_path[static_cast<size_t>(e)])].push_back(e);
  std::vector<at::Tensor> params;
  double sum = 0;
  int64_t count = 0;
  for (int p = 0; p < 4; ++p) {
    StatusOr<at::Tensor> file = read_params((run / final_params_name(p)).string());
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    params.push_back(*file);
    const auto [ps, pc] = oracle_loss(c, d, *file, rows[static_cast<size_t>(p)], 6);
    sum += ps;
    count += pc;
  }
  ASSERT_GT(count, 0);
  const double routed = sum / static_cast<double>(count);
  EXPECT_NEAR(s.final_val_loss, routed, 1e-5 * routed);

  // Every eval step: one path_eval record per path, all by island 0 (the lead), and one routed
  // eval; the last one lists the paths' validation sequences and training shards.
  std::map<int64_t, int> evals;
  std::map<std::pair<int64_t, int>, std::vector<int>> by_path;  // (step, path) -> islands
  std::map<int, std::string> hash;                              // island -> island_end global hash
  std::string last;
  for (const auto& l : lines_of(run / "metrics.jsonl")) {
    const auto event = json_find_string(l, "event");
    const auto step = static_cast<int64_t>(json_find_number(l, "step").value_or(-1));
    const int island = static_cast<int>(json_find_number(l, "island").value_or(-9));
    if (event == "eval") {
      ++evals[step];
      last = l;
    }
    if (event == "path_eval") by_path[{step, static_cast<int>(json_find_number(l, "path").value_or(-1))}].push_back(island);
    if (event == "island_end") hash[island] = json_find_string(l, "global_xxh64").value_or("");
  }
  EXPECT_EQ(evals.size(), 4u);
  for (int64_t step : {0, 4, 8, 12}) {
    EXPECT_EQ(evals[step], 1) << "step " << step;
    for (int p = 0; p < 4; ++p) EXPECT_EQ((by_path[{step, p}]), std::vector<int>{0}) << "step " << step << " path " << p;
  }
  EXPECT_EQ(json_find_number(last, "step").value_or(-1), 12);
  EXPECT_EQ(json_find_number(last, "tokens").value_or(-1), static_cast<double>(count));
  std::string val_sizes = "\"path_sequences\":[", train_sizes = "\"path_train_sequences\":[";
  for (int p = 0; p < 4; ++p) {
    val_sizes += (p ? "," : "") + std::to_string(rows[static_cast<size_t>(p)].size());
    train_sizes += (p ? "," : "") + std::to_string(d.path_train_sizes[static_cast<size_t>(p)]);
  }
  for (const std::string& doc : {last, read(run / "summary.json")}) {
    EXPECT_NE(doc.find(val_sizes + "]"), std::string::npos) << val_sizes << " not in " << doc;
    EXPECT_NE(doc.find(train_sizes + "]"), std::string::npos) << train_sizes << " not in " << doc;
  }

  // The composed paths: island i's own model for path i, final_params.bin island 0's.
  ASSERT_EQ(hash.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(params_xxh64_hex(params[static_cast<size_t>(i)]), hash[i]) << i;
  EXPECT_EQ(read(run / "final_params.bin"), read(run / final_params_name(0)));
  // Path = 2 e0 + e1: block 0 is level 0's module e0, block 1 level 1's module e1.
  auto model = models::make_model(c.model, d.shape, c10::Device(c10::kCPU), c.run.seed);
  for (const auto& slice : model->layout()) {
    auto part = [&](int p) { return params[static_cast<size_t>(p)].slice(0, slice.offset, slice.offset + slice.numel); };
    const bool same01 = at::equal(part(0), part(1)), same02 = at::equal(part(0), part(2));
    EXPECT_TRUE(at::equal(part(1), part(3)) == same02 && at::equal(part(2), part(3)) == same01) << slice.name;
    EXPECT_EQ(same01, slice.block != 1) << slice.name;
    EXPECT_EQ(same02, slice.block != 0) << slice.name;
  }

  // `atoll export --path 3`: a path no island held at the end.
  ExportOptions eo;
  eo.run_dir = run.string();
  eo.path = 3;
  const ExportResult er = export_params(eo);
  EXPECT_EQ(er.source, (run / final_params_name(3)).string());
  const std::string pickled = read(er.out);
  const auto dict = torch::pickle_load(std::vector<char>(pickled.begin(), pickled.end())).toGenericDict();
  ASSERT_EQ(static_cast<int64_t>(dict.size()), er.tensors);
  for (const auto& slice : model->layout()) {
    EXPECT_TRUE(at::equal(dict.at(slice.name).toTensor().reshape({-1}),
                          params[3].slice(0, slice.offset, slice.offset + slice.numel)))
        << slice.name;
  }
}

// Fewer islands than paths, the lead (island 0) killed mid-run: island 1 evaluates every path
// from then on, every eval step still has one record per path and one routed eval, and island
// 1 writes every path's final parameters.
TEST(DiPaCoEval, FewerIslandsThanPathsAKilledLeadsEvalsGoOnOnASurvivor) {
  TempDir tmp;
  config::Config c = rotation_config(tmp.path);
  c.islands.events = config::parse_config("islands:\n  count: 2\n  events:\n    - {kill: 0, at_step: 5}\n", "e.yaml")
                         .islands.events;
  const RunSummary s = simulate(c, {false, true});
  EXPECT_TRUE(std::isfinite(s.final_val_loss));
  std::map<int64_t, int> evals;
  std::map<std::pair<int64_t, int>, std::vector<int>> by_path;
  for (const auto& l : lines_of(tmp.path / "runs/t/metrics.jsonl")) {
    const auto event = json_find_string(l, "event");
    const auto step = static_cast<int64_t>(json_find_number(l, "step").value_or(-1));
    if (event == "eval") ++evals[step];
    if (event == "path_eval")
      by_path[{step, static_cast<int>(json_find_number(l, "path").value_or(-1))}].push_back(
          static_cast<int>(json_find_number(l, "island").value_or(-1)));
  }
  for (int64_t step : {0, 4, 8, 12}) {
    EXPECT_EQ(evals[step], 1) << "step " << step;
    const std::vector<int> by = {step < 5 ? 0 : 1};
    for (int p = 0; p < 4; ++p) EXPECT_EQ((by_path[{step, p}]), by) << "step " << step << " path " << p;
  }
  for (int p = 0; p < 4; ++p) EXPECT_TRUE(fs::exists(tmp.path / "runs/t" / final_params_name(p))) << p;
}

// Re-sharding with fewer islands than paths: every island scores the router split with every
// path's model (composed from its module copies), so each router sequence is labelled with its
// lowest-loss path among all P, paths no island trains at the step included. The Resharder on
// two islands over the in-process group, fed the four paths of a trained run, against the
// labels recomputed here; then the same in a run (one reshard record, from both islands'
// scores; the evals after it report the new shards).
TEST(DiPaCoEval, FewerIslandsThanPathsReshardingScoresEveryPath) {
  TempDir tmp;
  config::Config c = rotation_config(tmp.path);
  simulate(c, {false, true});
  std::vector<at::Tensor> paths;
  for (int p = 0; p < 4; ++p) paths.push_back(*read_params((tmp.path / "runs/t" / final_params_name(p)).string()));
  c.dipaco.reshard_at = 4;
  c.dipaco.router_fraction = 0.2;
  c.run.name = "r";
  const RunData d = load_run_data(c);
  const int64_t R = static_cast<int64_t>(d.router_rows.size());
  ASSERT_GT(R, 20);
  std::vector<int64_t> labels(4, 0);
  for (int64_t e : d.router_rows) {
    int best = 0;
    double best_loss = INFINITY;
    for (int p = 0; p < 4; ++p) {
      const auto [sum, count] = oracle_loss(c, d, paths[static_cast<size_t>(p)], {e}, 6, d.splits.train.get());
      if (sum / static_cast<double>(count) < best_loss) best_loss = sum / static_cast<double>(count), best = p;
    }
    ++labels[static_cast<size_t>(best)];
  }
  EXPECT_GE(std::count_if(labels.begin(), labels.end(), [](int64_t n) { return n > 0; }), 2) << "one path won all";

  transport::Scheduler scheduler(2);
  transport::InprocHub hub(2, scheduler);
  std::vector<std::unique_ptr<transport::Group>> groups;
  for (int i = 0; i < 2; ++i) groups.push_back(hub.make_group(i));
  std::vector<Resharder::Outcome> out(2);
  const at::Tensor models = at::cat(paths);
  scheduler.run([&](int i) {
    auto scorer = make_evaluator(c, d);
    out[static_cast<size_t>(i)] = Resharder(c, d, i).run(*groups[static_cast<size_t>(i)], *scorer, models);
  });
  int64_t trained = 0;
  for (int64_t n : d.path_train_sizes) trained += n;
  for (const Resharder::Outcome& o : out) {
    EXPECT_EQ(o.labels, labels) << "labels differ from the lowest-loss paths";
    EXPECT_EQ(o.contributors, (std::vector<int>{0, 1}));
    EXPECT_TRUE(o.shard.empty());
    ASSERT_EQ(o.path_shards.size(), 4u);
    int64_t sum = 0;
    for (int p = 0; p < 4; ++p) {
      const auto& shard = o.path_shards[static_cast<size_t>(p)];
      EXPECT_EQ(static_cast<int64_t>(shard.size()), o.path_train_sizes[static_cast<size_t>(p)]) << p;
      EXPECT_TRUE(std::is_sorted(shard.begin(), shard.end())) << p;
      sum += static_cast<int64_t>(shard.size());
    }
    EXPECT_EQ(sum, trained) << "the router split stays out of training";
  }
  EXPECT_EQ(out[0].path_shards, out[1].path_shards);
  EXPECT_EQ(out[0].path_val_sequences, out[1].path_val_sequences);

  // In a run: re-sharding at step 4 (after round 0), scored by both islands.
  simulate(c, {false, true});
  std::vector<std::string> reshards;
  std::map<int64_t, std::string> eval_of;
  for (const auto& l : lines_of(tmp.path / "runs/r/metrics.jsonl")) {
    if (json_find_string(l, "event") == "reshard") reshards.push_back(l);
    if (json_find_string(l, "event") == "eval") eval_of[static_cast<int64_t>(json_find_number(l, "step").value_or(-1))] = l;
  }
  ASSERT_EQ(reshards.size(), 1u);
  EXPECT_EQ(json_find_number(reshards[0], "contributors").value_or(-1), 2);
  EXPECT_EQ(json_find_number(reshards[0], "router_sequences").value_or(-1), static_cast<double>(R));
  auto list_of = [](const std::string& line, const std::string& key) {
    const size_t a = line.find("\"" + key + "\":[");
    return a == std::string::npos ? std::string() : line.substr(a + key.size() + 4, line.find(']', a) - a - key.size() - 4);
  };
  ASSERT_EQ(eval_of.size(), 4u);
  for (int64_t step : {4, 8, 12}) {
    EXPECT_EQ(list_of(eval_of[step], "path_train_sequences"), list_of(reshards[0], "path_train_sequences")) << step;
    EXPECT_EQ(list_of(eval_of[step], "path_sequences"), list_of(reshards[0], "path_val_sequences")) << step;
  }
}

// Discriminative re-sharding at step 4 (an outer-round boundary): one reshard record, from the
// lowest island; the router split is out of training; the evals from step 4 on report the
// router's training shards and validation sequences, step 0's the k-means ones; the same
// config gives the same re-sharding.
TEST(DiPaCoEval, ReshardingAtItsStepReroutesTrainingAndValidation) {
  TempDir tmp;
  const config::Config c = two_kinds_config(tmp.path, "");
  config::Config r = c;
  r.dipaco.reshard_at = 4;
  r.dipaco.router_fraction = 0.1;
  const RunData d = load_run_data(r);
  ASSERT_FALSE(d.router_rows.empty());
  int64_t trained = 0;
  for (int64_t s : d.path_train_sizes) trained += s;
  EXPECT_EQ(trained + static_cast<int64_t>(d.router_rows.size()), d.splits.train->size());
  for (int64_t e : d.router_rows) EXPECT_EQ(d.train_path[static_cast<size_t>(e)], -1);

  simulate(r, {false, true});
  const auto metrics = lines_of(tmp.path / "runs/t/metrics.jsonl");
  std::vector<std::string> reshards;
  std::map<int64_t, std::string> eval_of;
  for (const auto& l : metrics) {
    if (json_find_string(l, "event") == "reshard") reshards.push_back(l);
    if (json_find_string(l, "event") == "eval") eval_of[static_cast<int64_t>(json_find_number(l, "step").value_or(-1))] = l;
  }
  ASSERT_EQ(reshards.size(), 1u);
  const std::string& rec = reshards[0];
  EXPECT_EQ(json_find_number(rec, "step").value_or(-1), 4);
  EXPECT_EQ(json_find_number(rec, "island").value_or(-1), 0);
  EXPECT_EQ(json_find_number(rec, "contributors").value_or(-1), 4);
  EXPECT_EQ(json_find_number(rec, "router_sequences").value_or(-1), static_cast<double>(d.router_rows.size()));
  auto list_of = [](const std::string& line, const std::string& key) {
    const size_t a = line.find("\"" + key + "\":[");
    const size_t from = a + key.size() + 4;  // after "key":[
    return a == std::string::npos ? std::string() : line.substr(from, line.find(']', a) - from);
  };
  auto sum_of = [](const std::string& list) {
    int64_t sum = 0;
    std::stringstream ss(list);
    for (std::string v; std::getline(ss, v, ',');) sum += std::stoll(v);
    return sum;
  };
  EXPECT_EQ(sum_of(list_of(rec, "labels")), static_cast<int64_t>(d.router_rows.size()));
  EXPECT_EQ(sum_of(list_of(rec, "path_train_sequences")), trained) << "the router split stays out of training";
  const std::string kmeans = std::to_string(d.path_train_sizes[0]) + "," + std::to_string(d.path_train_sizes[1]);
  ASSERT_EQ(eval_of.size(), 4u);
  EXPECT_EQ(list_of(eval_of[0], "path_train_sequences"), kmeans);
  for (int64_t step : {4, 8, 12}) {
    EXPECT_EQ(list_of(eval_of[step], "path_train_sequences"), list_of(rec, "path_train_sequences")) << step;
    EXPECT_EQ(list_of(eval_of[step], "path_sequences"), list_of(rec, "path_val_sequences")) << step;
  }
  EXPECT_EQ(sum_of(list_of(eval_of[0], "path_sequences")), sum_of(list_of(rec, "path_val_sequences")));

  // Deterministic: the same config re-shards the same way.
  r.run.name = "t2";
  simulate(r, {false, true});
  for (const auto& l : lines_of(tmp.path / "runs/t2/metrics.jsonl")) {
    if (json_find_string(l, "event") != "reshard") continue;
    EXPECT_EQ(list_of(l, "labels"), list_of(rec, "labels"));
    EXPECT_EQ(list_of(l, "path_train_sequences"), list_of(rec, "path_train_sequences"));
    EXPECT_EQ(json_find_number(l, "moved"), json_find_number(rec, "moved"));
  }

  // Refused with one line: a step that is no round boundary.
  r.dipaco.reshard_at = 5;
  try {
    load_run_data(r);
    FAIL() << "dipaco.reshard_at 5 with inner_steps 4 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("dipaco.reshard_at"), std::string::npos) << e.what();
  }
}

// EvalSummary::add_path: the routed loss is the token-weighted mean of the paths' (a path with
// no tokens counts for nothing), once every path's result of the step is in; a second result
// of a step's path is ignored; a checkpoint between two paths' results (saved / restore)
// completes the step after the resume as it would have without it.
TEST(DiPaCoEval, PathResultsCombineIntoTheRoutedLossAcrossACheckpoint) {
  auto path = [](int p, double loss, int64_t tokens) {
    EvalResult r;
    r.path = p;
    r.paths = 3;
    r.loss = loss;
    r.count = tokens;
    r.sequences = tokens / 10;
    r.train_sequences = 100 + p;
    return r;
  };
  EvalSummary a;
  EXPECT_FALSE(a.add_path(4, path(0, 2.0, 30)));
  EXPECT_FALSE(a.add_path(4, path(2, NAN, 0)));
  EXPECT_FALSE(a.add_path(4, path(0, 9.0, 30))) << "a second result of path 0 taken";
  EXPECT_TRUE(a.evaluated(4, 0));
  EXPECT_FALSE(a.evaluated(4, 1));
  EvalSummary b;
  b.restore(a.saved());
  const std::optional<EvalResult> routed = b.add_path(4, path(1, 3.0, 10));
  ASSERT_TRUE(routed.has_value());
  EXPECT_DOUBLE_EQ(routed->loss, (2.0 * 30 + 3.0 * 10) / 40.0);
  EXPECT_EQ(routed->count, 40);
  EXPECT_EQ(routed->paths, 3);
  EXPECT_EQ(routed->path_tokens, (std::vector<int64_t>{30, 10, 0}));
  EXPECT_EQ(routed->path_train_sequences, (std::vector<int64_t>{100, 101, 102}));
  ASSERT_TRUE(b.add(4, routed->loss, -1));
  JsonObject s;
  b.add_fields(s, 4, false);
  EXPECT_NE(s.str().find("\"path_tokens\":[30,10,0]"), std::string::npos) << s.str();
  EXPECT_NE(s.str().find("\"path_val_losses\":[2,3,null]"), std::string::npos) << s.str();
  // Restored after the step was complete: the summary's per-path lists come back too.
  EvalSummary c;
  c.restore(b.saved());
  JsonObject t;
  c.add_fields(t, 4, false);
  EXPECT_EQ(s.str(), t.str());
}

// data.loss_after: a dense run's evaluation scores only the tokens after the first N of each
// sequence, so its loss is comparable with a routed DiPaCo run's; N > seq_len is refused.
TEST(DiPaCoEval, LossAfterGivesADenseRunTheSameWindow) {
  TempDir tmp;
  config::Config c = two_kinds_config(tmp.path, "");
  c.algorithm.choose("diloco");
  c.algorithm.get<algorithms::DilocoOptions>().inner_steps = 4;  // as the dipaco config's
  c.dipaco = {};
  const RunData whole = load_run_data(c);
  EXPECT_EQ(whole.loss_after, 0);
  c.data.loss_after = 6;
  const RunData d = load_run_data(c);
  EXPECT_EQ(d.paths, 0);
  auto ev = make_evaluator(c, d);
  auto model = models::make_model(c.model, d.shape, c10::Device(c10::kCPU), c.run.seed);
  const EvalResult r = ev->evaluate(model->params());
  const auto order = data::validation_indices(*d.splits.val, c.train.batch_size, 0, c.run.seed);
  const auto [sum, count] = oracle_loss(c, d, model->params(), order, 6);
  EXPECT_EQ(r.count, count);
  EXPECT_NEAR(r.loss, sum / static_cast<double>(count), 1e-5);
  // The whole window (loss_after 0) scores every target: more tokens, another loss.
  const EvalResult all = make_evaluator(c, whole)->evaluate(model->params());
  EXPECT_EQ(all.count, static_cast<int64_t>(order.size()) * c.model.seq_len);
  EXPECT_NE(all.loss, r.loss);

  c.data.loss_after = 17;
  try {
    load_run_data(c);
    FAIL() << "data.loss_after 17 > seq_len 16 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("data.loss_after"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace atl::core
