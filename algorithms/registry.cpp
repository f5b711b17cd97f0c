// The list of algorithms atoll knows, by the name used in `algorithm.name`.
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
  ServerFactory make_server;  // null: no server role
  AlgorithmTraits traits;
};

constexpr const char* kFedavgJoiners =
    "its clients follow a plan of rounds fixed at the start; a killed client is dropped from its rounds";

const Entry kAlgorithms[] = {
    {"ddp", make_ddp, no_rules, nullptr, {.extra_buffers = 0, .extra_buffers_text = ""}},
    {"diloco", make_diloco, no_rules, nullptr, {}},
    {"fedavg", make_fedavg, fedavg::check, make_fedavg_server,
     {.refuses_joiners = kFedavgJoiners}},
    {"streaming_diloco", make_streaming_diloco, streaming_rules, nullptr, {}},
    {"async_local_sgd", make_async_local_sgd, async_local_sgd::check_dn_c, make_async_local_sgd_server, {}},
    {"demo", make_demo, no_rules, nullptr,
     {.extra_buffers = 3, .extra_buffers_text = "demo residual and DCT buffers x3",  // algorithms/demo.h
      .codec_problem = demo::codec_problem}},
    {"dipaco", make_dipaco, module_rules, nullptr, {}},
    {"sparseloco", make_sparseloco, no_rules, nullptr,
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
