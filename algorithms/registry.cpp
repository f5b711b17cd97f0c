// The list of algorithms atoll knows, by the name used in `algorithm.name`.
#include <functional>
#include <string>

#include "algorithms/async_local_sgd.h"
#include "algorithms/builtin.h"
#include "algorithms/fedavg.h"
#include "algorithms/streaming_diloco.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace {

std::optional<OptionProblem> no_rules(const AlgorithmOptions&) { return std::nullopt; }

std::optional<OptionProblem> streaming_rules(const AlgorithmOptions& o) {
  return streaming_diloco::Schedule::check(o.inner_steps, o.fragments, o.overlap_steps);
}

std::optional<OptionProblem> dipaco_rules(const AlgorithmOptions& o) {
  if (o.module_islands.empty()) return OptionProblem{"dipaco.levels", "algorithm dipaco needs a modular model"};
  return std::nullopt;
}

struct Entry {
  const char* name;
  std::unique_ptr<Algorithm> (*make)(const AlgorithmOptions&, int);
  // The rules `make` (and make_server) enforce, checked before anything is built.
  std::optional<OptionProblem> (*check)(const AlgorithmOptions&);
};

constexpr Entry kAlgorithms[] = {
    {"ddp", make_ddp, no_rules},
    {"diloco", make_diloco, no_rules},
    {"fedavg", make_fedavg, fedavg::check},
    {"streaming_diloco", make_streaming_diloco, streaming_rules},
    {"async_local_sgd", make_async_local_sgd, async_local_sgd::check_dn_c},
    {"demo", make_demo, no_rules},
    {"dipaco", make_dipaco, dipaco_rules},
};

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
  for (const auto& e : kAlgorithms) {
    if (options.name == e.name) return e.check(options);
  }
  return OptionProblem{"algorithm.name", "unknown algorithm '" + options.name + "' (valid: " +
                                             joined_names() + ")"};
}

std::unique_ptr<Algorithm> make_algorithm(const AlgorithmOptions& options, int island) {
  for (const auto& e : kAlgorithms) {
    if (options.name == e.name) return e.make(options, island);
  }
  throw UserError("unknown algorithm '" + options.name + "' (valid: " + joined_names() + ")");
}

std::unique_ptr<transport::OuterServer> make_server(const AlgorithmOptions& options, const at::Tensor& initial,
                                                    std::function<void(const ServerRound&)> on_round) {
  if (options.name == "fedavg") return make_fedavg_server(options, initial, std::move(on_round));
  if (options.name == "async_local_sgd") {
    return make_async_local_sgd_server(options, initial, std::move(on_round));
  }
  return nullptr;
}

}  // namespace atl::algorithms
