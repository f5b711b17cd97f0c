// The algorithm catalog (catalog.h): one row per algorithm of what validation and planning
// ask without building it: the option rules, what the run derives of the options, the server
// role's round numbering and the traits. No libtorch. A new algorithm is its file(s), a row
// here, a factory row in algorithms/registry.cpp and its options struct in algorithms/options.h.
#include "algorithms/catalog.h"

#include <algorithm>
#include <string>

#include "algorithms/async_local_sgd.h"
#include "algorithms/fedavg.h"
#include "algorithms/streaming_diloco.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace {

std::optional<OptionProblem> no_rules(const AlgorithmOptions&) { return std::nullopt; }

std::optional<OptionProblem> streaming_rules(const AlgorithmOptions& options) {
  const StreamingDilocoOptions& o = options.get<StreamingDilocoOptions>();
  return streaming_diloco::Schedule::check(o.inner_steps, o.fragments, o.overlap_steps);
}

// A fragment is made of whole transformer blocks (also checked against the layout at setup;
// here it fails before the run starts).
std::optional<OptionProblem> streaming_resolve(AlgorithmOptions& o) {
  const int fragments = o.get<StreamingDilocoOptions>().fragments;
  if (fragments <= std::max(o.model_blocks, 1)) return std::nullopt;
  return OptionProblem{"algorithm.fragments", std::to_string(fragments) + " fragments but model " + o.model +
                                                  " has " + std::to_string(o.model_blocks) +
                                                  " transformer blocks (a fragment is made of whole blocks)"};
}

// fedavg's rounds: algorithm.rounds, or train.steps / local_steps.
std::optional<OptionProblem> fedavg_resolve(AlgorithmOptions& options) {
  FedAvgOptions& o = options.get<FedAvgOptions>();
  if (o.rounds > 0) return std::nullopt;
  if (o.local_steps == 0)
    return OptionProblem{"algorithm.rounds", "fedavg with local_epochs needs algorithm.rounds (or set "
                                             "algorithm.local_steps)"};
  o.rounds = std::max<int64_t>(1, options.train_steps / o.local_steps);
  return std::nullopt;
}

ServerRounds fedavg_rounds(const AlgorithmOptions& o, int64_t examples_per_client) {
  return {false, o.get<FedAvgOptions>().rounds, fedavg::local_steps(o, examples_per_client)};
}
ServerRounds async_rounds(const AlgorithmOptions& o, int64_t) { return {true, async_local_sgd::total_steps(o), 0}; }

// DiLoCo per module: the islands of each module come from a modular model's path structure.
std::optional<OptionProblem> module_rules(const AlgorithmOptions& o) {
  if (o.module_islands.empty()) return OptionProblem{"dipaco.levels", "algorithm dipaco needs a modular model"};
  return std::nullopt;
}

struct Row {
  const char* name;
  // The rules make_algorithm (and make_server) enforce, checked before anything is built.
  std::optional<OptionProblem> (*check)(const AlgorithmOptions&);
  // resolve_options: what the run derives and checks of the options (null: nothing).
  std::optional<OptionProblem> (*resolve)(AlgorithmOptions&);
  ServerRounds (*rounds)(const AlgorithmOptions&, int64_t);  // with a server role
  AlgorithmTraits traits;
};

constexpr const char* kFedavgJoiners =
    "its clients follow a plan of rounds fixed at the start; a killed client is dropped from its rounds";

const Row kRows[] = {
    {"ddp", no_rules, nullptr, nullptr, {.extra_buffers = 0, .extra_buffers_text = ""}},
    {"diloco", no_rules, nullptr, nullptr, {.step_local_gradient = true}},
    {"fedavg", fedavg::check, fedavg_resolve, fedavg_rounds,
     {.refuses_joiners = kFedavgJoiners,
      .checkpoint_cut = CheckpointCut::kServerRound,
      .server_role = true,
      .step_local_gradient = true}},
    {"streaming_diloco", streaming_rules, streaming_resolve, nullptr, {.step_local_gradient = true}},
    {"async_local_sgd", async_local_sgd::check_dn_c, nullptr, async_rounds,
     {.checkpoint_cut = CheckpointCut::kServerTime, .server_role = true, .step_local_gradient = true}},
    {"demo", no_rules, nullptr, nullptr,
     {.extra_buffers = 3, .extra_buffers_text = "demo residual and DCT buffers x3",  // algorithms/demo.h
      .sends_own_selection = "its own DCT top-k coefficients"}},
    {"dipaco", module_rules, nullptr, nullptr, {.step_local_gradient = true}},
    {"sparseloco", no_rules, nullptr, nullptr,
     {.extra_buffers = 4,
      .extra_buffers_text = "global model, error accumulator and two scratch buffers",
      .sends_own_selection = "its own top-k values",
      .step_local_gradient = true}},
};

const Row* find_row(const std::string& name) {
  for (const auto& r : kRows)
    if (name == r.name) return &r;
  return nullptr;
}

std::string algorithm_list() {
  std::string out;
  for (const auto& r : kRows) out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

}  // namespace

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& r : kRows) names.emplace_back(r.name);
  return names;
}

std::optional<OptionProblem> name_problem(const std::string& name) {
  if (find_row(name)) return std::nullopt;
  return OptionProblem{"algorithm.name", "unknown algorithm '" + name + "' (valid: " + algorithm_list() + ")"};
}

std::optional<OptionProblem> check_options(const AlgorithmOptions& options) {
  if (const Row* r = find_row(options.name)) return r->check(options);
  return name_problem(options.name);
}

std::optional<OptionProblem> resolve_options(AlgorithmOptions& options) {
  const Row* r = find_row(options.name);
  return r && r->resolve ? r->resolve(options) : std::nullopt;
}

ServerRounds server_rounds(const AlgorithmOptions& options, int64_t examples_per_client) {
  const Row* r = find_row(options.name);
  return r && r->rounds ? r->rounds(options, examples_per_client) : ServerRounds{};
}

const AlgorithmTraits* find_algorithm_traits(const std::string& name) {
  const Row* r = find_row(name);
  return r ? &r->traits : nullptr;
}

const AlgorithmTraits& algorithm_traits(const std::string& name) {
  if (const Row* r = find_row(name)) return r->traits;
  throw UserError("unknown algorithm '" + name + "' (valid: " + algorithm_list() + ")");
}

std::optional<std::string> codec_problem(const std::string& name, const std::vector<compression::StageConfig>& stages) {
  const char* own = algorithm_traits(name).sends_own_selection;
  if (own == nullptr) return std::nullopt;
  for (const auto& s : stages) {
    const compression::StageInfo* info = compression::find_stage_info(s.id);
    if (info && (info->slot == compression::Slot::kTransform || info->slot == compression::Slot::kSparsify)) {
      return std::string("stage '") + info->name + "' does not apply to " + name + ", which sends " + own +
             " (only quantize and zstd stages, applied to those values)";
    }
  }
  return std::nullopt;
}

}  // namespace atl::algorithms
