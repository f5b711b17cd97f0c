// The algorithm catalog: what validation and planning ask of each algorithm without building
// one (algorithms/catalog.cpp, one row per algorithm). No libtorch: the `atoll` front end
// validates configs with it before it loads libtorch (docs/architecture.md "Front end and
// engine"). The factories that build an algorithm and its server role are the other half of
// an algorithm's registration (algorithms/registry.cpp); an algorithm's `algorithm:` keys
// are its options struct (algorithms/options.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/options.h"
#include "compression/stage.h"

namespace atl::algorithms {

// Where an algorithm's checkpoints are cut (docs/checkpoints.md).
enum class CheckpointCut {
  kStep,         // at a step boundary every island reaches; checkpoint.every counts steps
  kServerRound,  // fedavg: at server rounds, checkpoint.every rounds apart
  kServerTime,   // async_local_sgd: at virtual time T, before every server interaction at or
                 // after T; checkpoint.every counts the fastest island's nominal steps
};

// What validation and the run ask of an algorithm, from its catalog row, so that they never
// compare names.
struct AlgorithmTraits {
  // Rejoin and add events: nullptr when the algorithm takes joiners, else why it does not
  // (validation's message: "rejoin and add events are not available with NAME (WHY)").
  const char* refuses_joiners = nullptr;
  // Full-size fp32 buffers an island holds beyond its parameters, gradients and inner
  // optimizer state, and what they are (validate's memory estimate).
  int extra_buffers = 1;
  const char* extra_buffers_text = "global model";
  // nullptr: the configured codec carries the exchange. Else what the algorithm selects and
  // sends itself ("its own top-k values"): then only quantize and zstd stages apply, to
  // those values (codec_problem()).
  const char* sends_own_selection = nullptr;
  // Where its checkpoints are cut (Algorithm::checkpoint_cut).
  CheckpointCut checkpoint_cut = CheckpointCut::kStep;
  // nullptr when its state() and load() capture everything it needs, with its options, to
  // continue exactly; else what keeps it from that, for the user's error (checkpoint.every
  // is refused).
  const char* checkpoint_limit = nullptr;
  // Whether it has a server role (fedavg, async_local_sgd): make_server builds it.
  bool server_role = false;
  // Whether it leaves the gradient buffer (IslandContext::grads) alone outside an inner
  // step's window — from the backward to the inner optimizer's step — and waits on no one
  // inside that window (no exchange in after_backward or inner_step). Then the simulator's
  // islands, which compute one at a time, share one gradient buffer (docs/simulator.md
  // "Memory"). Not ddp (it all-reduces the gradient) nor demo (its step exchanges).
  bool step_local_gradient = false;
};
// The row of `name`; throws atl::UserError for an unknown name, listing the valid names.
const AlgorithmTraits& algorithm_traits(const std::string& name);
// The same, or nullptr for a name without a row.
const AlgorithmTraits* find_algorithm_traits(const std::string& name);
// A problem of "algorithm.name" listing the valid names, for a name without a row; else none.
std::optional<OptionProblem> name_problem(const std::string& name);
// The list of algorithms atoll knows, by the name used in `algorithm.name`.
std::vector<std::string> algorithm_names();

// Why the codec of `stages` cannot carry algorithm `name`'s exchange, or nullopt.
std::optional<std::string> codec_problem(const std::string& name, const std::vector<compression::StageConfig>& stages);

// How a server role's rounds are numbered for its evaluations (core::ServerEvalSchedule):
// `counts_steps`: each round reports the local steps applied so far, summed over islands
// (async_local_sgd); else outer rounds, each standing for `steps_per_round` nominal inner
// steps (fedavg). `last`: the final round's number.
struct ServerRounds {
  bool counts_steps = false;
  int64_t last = 0;
  int64_t steps_per_round = 0;
};
// Of `options.name`'s server role, with `examples_per_client` training examples per island;
// an algorithm without one: {} (never asked).
ServerRounds server_rounds(const AlgorithmOptions& options, int64_t examples_per_client);

}  // namespace atl::algorithms
