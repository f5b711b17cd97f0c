// The list of algorithms atoll knows, by the name used in `algorithm.name`.
#include <algorithm>
#include <functional>
#include <string>

#include "algorithms/async_local_sgd.h"
#include "algorithms/builtin.h"
#include "algorithms/demo.h"
#include "algorithms/fedavg.h"
#include "algorithms/streaming_diloco.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace {

std::optional<OptionProblem> no_rules(const AlgorithmOptions&) { return std::nullopt; }

std::optional<OptionProblem> streaming_rules(const AlgorithmOptions& o) {
  return streaming_diloco::Schedule::check(o.inner_steps, o.fragments, o.overlap_steps);
}

// A fragment is made of whole transformer blocks (also checked against the layout at setup;
// here it fails before the run starts).
std::optional<OptionProblem> streaming_resolve(AlgorithmOptions& o) {
  if (o.fragments <= std::max(o.model_blocks, 1)) return std::nullopt;
  return OptionProblem{"algorithm.fragments", std::to_string(o.fragments) + " fragments but model " + o.model +
                                                  " has " + std::to_string(o.model_blocks) +
                                                  " transformer blocks (a fragment is made of whole blocks)"};
}

// fedavg's rounds: algorithm.rounds, or train.steps / local_steps.
std::optional<OptionProblem> fedavg_resolve(AlgorithmOptions& o) {
  if (o.rounds > 0) return std::nullopt;
  if (o.local_steps == 0)
    return OptionProblem{"algorithm.rounds", "fedavg with local_epochs needs algorithm.rounds (or set "
                                             "algorithm.local_steps)"};
  o.rounds = std::max<int64_t>(1, o.train_steps / o.local_steps);
  return std::nullopt;
}

ServerRounds fedavg_rounds(const AlgorithmOptions& o, int64_t examples_per_client) {
  return {false, o.rounds, fedavg::local_steps(o, examples_per_client)};
}
ServerRounds async_rounds(const AlgorithmOptions& o, int64_t) { return {true, async_local_sgd::total_steps(o), 0}; }

// DiLoCo per module: the islands of each module come from a modular model's path structure.
std::optional<OptionProblem> module_rules(const AlgorithmOptions& o) {
  if (o.module_islands.empty()) return OptionProblem{"dipaco.levels", "algorithm dipaco needs a modular model"};
  return std::nullopt;
}

using ServerFactory = std::unique_ptr<transport::OuterServer> (*)(const AlgorithmOptions&, const at::Tensor&,
                                                                  std::function<void(const ServerRound&)>);

struct Entry {
  const char* name;
  std::unique_ptr<Algorithm> (*make)(const AlgorithmOptions&, int);
  // The rules `make` (and make_server) enforce, checked before anything is built.
  std::optional<OptionProblem> (*check)(const AlgorithmOptions&);
  // resolve_options: what the run derives and checks of the options (null: nothing).
  std::optional<OptionProblem> (*resolve)(AlgorithmOptions&);
  ServerFactory make_server;  // null: no server role
  ServerRounds (*rounds)(const AlgorithmOptions&, int64_t);  // with make_server
  AlgorithmTraits traits;
};

constexpr const char* kFedavgJoiners =
    "its clients follow a plan of rounds fixed at the start; a killed client is dropped from its rounds";

const Entry kAlgorithms[] = {
    {"ddp", make_ddp, no_rules, nullptr, nullptr, nullptr, {.extra_buffers = 0, .extra_buffers_text = ""}},
    {"diloco", make_diloco, no_rules, nullptr, nullptr, nullptr, {}},
    {"fedavg", make_fedavg, fedavg::check, fedavg_resolve, make_fedavg_server, fedavg_rounds,
     {.refuses_joiners = kFedavgJoiners}},
    {"streaming_diloco", make_streaming_diloco, streaming_rules, streaming_resolve, nullptr, nullptr, {}},
    {"async_local_sgd", make_async_local_sgd, async_local_sgd::check_dn_c, nullptr,
     make_async_local_sgd_server, async_rounds, {}},
    {"demo", make_demo, no_rules, nullptr, nullptr, nullptr,
     {.extra_buffers = 3, .extra_buffers_text = "demo residual and DCT buffers x3",  // algorithms/demo.h
      .codec_problem = demo::codec_problem}},
    {"dipaco", make_dipaco, module_rules, nullptr, nullptr, nullptr, {}},
    {"sparseloco", make_sparseloco, no_rules, nullptr, nullptr, nullptr,
     {.extra_buffers = 4, .extra_buffers_text = "global model, error accumulator and two scratch buffers",
      .codec_problem = sparseloco_codec_problem}},
};

const Entry* find(const std::string& name) {
  for (const auto& e : kAlgorithms)
    if (name == e.name) return &e;
  return nullptr;
}

std::string joined_names() {
  std::string out;
  for (const auto& e : kAlgorithms) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

}  // namespace

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& e : kAlgorithms) names.emplace_back(e.name);
  return names;
}

std::optional<OptionProblem> check_options(const AlgorithmOptions& options) {
  if (const Entry* e = find(options.name)) return e->check(options);
  return OptionProblem{"algorithm.name", "unknown algorithm '" + options.name + "' (valid: " +
                                             joined_names() + ")"};
}

std::optional<OptionProblem> resolve_options(AlgorithmOptions& options) {
  const Entry* e = find(options.name);
  return e && e->resolve ? e->resolve(options) : std::nullopt;
}

ServerRounds server_rounds(const AlgorithmOptions& options, int64_t examples_per_client) {
  const Entry* e = find(options.name);
  return e && e->rounds ? e->rounds(options, examples_per_client) : ServerRounds{};
}

std::unique_ptr<Algorithm> make_algorithm(const AlgorithmOptions& options, int island) {
  if (const Entry* e = find(options.name)) return e->make(options, island);
  throw UserError("unknown algorithm '" + options.name + "' (valid: " + joined_names() + ")");
}

const AlgorithmTraits& algorithm_traits(const std::string& name) {
  if (const Entry* e = find(name)) return e->traits;
  throw UserError("unknown algorithm '" + name + "' (valid: " + joined_names() + ")");
}

std::unique_ptr<transport::OuterServer> make_server(const AlgorithmOptions& options, const at::Tensor& initial,
                                                    std::function<void(const ServerRound&)> on_round) {
  const Entry* e = find(options.name);
  return e && e->make_server ? e->make_server(options, initial, std::move(on_round)) : nullptr;
}

}  // namespace atl::algorithms
