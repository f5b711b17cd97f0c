// Options of the outer-loop algorithms, declared once: the `algorithm:` section of a config
// is AlgorithmOptions::fields() (src/config reads and writes it through that list; this
// folder never sees YAML). The members after the config keys describe the run and are
// filled by src/core/components.cpp from other sections.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/base/fields.h"
#include "src/base/status.h"

namespace atl::algorithms {

enum class OuterKind : uint8_t { kNesterov, kSgd, kAdam };
// diloco: how the outer all-reduce overlaps the next round (docs/algorithms.md §3).
enum class Overlap : uint8_t { kNone, kDelayed, kEager };
// streaming_diloco: how transformer blocks are dealt to fragments (docs/algorithms.md §2.1).
enum class FragmentMode : uint8_t { kStrided, kSequential };
// async_local_sgd: what the server does with each arriving pseudo-gradient (docs/algorithms.md §5).
enum class AsyncUpdate : uint8_t { kDelayedNesterov, kNaive };
// sparseloco: the divisor of each coordinate's sum of decoded messages (docs/algorithms.md §13).
enum class Aggregation : uint8_t { kMeanAll, kMeanSelected };

struct OuterOptimizerOptions {
  OuterKind kind = OuterKind::kNesterov;
  double lr = 0.7;          // outer learning rate
  double momentum = 0.9;    // nesterov / sgd
  double beta1 = 0.9;       // adam
  double beta2 = 0.999;     // adam
  double eps = 1e-1;        // adam
};

struct AlgorithmOptions {
  std::string name = "diloco";   // the name of its catalog row (algorithms/catalog.cpp)
  int64_t inner_steps = 50;      // diloco: H, inner steps per round
  OuterOptimizerOptions outer;   // outer_optimizer, outer_lr, ... (the keys in fields())
  bool weight_by_shard = false;  // weighting shard_size: each island weighs n_i / sum n (else 1)
  // fedavg
  double client_fraction = 0.1;  // C: fraction of clients sampled per round (at least one)
  int64_t rounds = 0;            // R; 0 = derived: train.steps / local_steps
  int64_t local_steps = 0;       // inner steps per selected client per round; 0 = local_epochs
  int local_epochs = 1;          // E: passes over the shard when local_steps == 0
  double round_timeout_s = 0;    // a round's deadline after it opens (virtual s in simulate,
                                 // wall s in real runs): results not in by then are dropped; 0 = none
  int min_clients = 1;           // fewer results than this: the round is skipped (model unchanged)
  bool error_feedback = true;    // lossy codecs: carry each island's compression error into
                                 // its next exchange (residual added before encoding)
  // diloco
  Overlap overlap = Overlap::kNone;  // delayed / eager: the all-reduce of round t completes
                                     // at the end of round t+1 (docs/algorithms.md)
  // streaming_diloco
  int fragments = 2;                 // P: fragments of transformer blocks
  FragmentMode fragment_mode = FragmentMode::kStrided;  // how blocks are dealt to fragments
  int64_t overlap_steps = 1;         // tau: inner steps between a fragment's send and receive
  double mix_alpha = 0.5;            // merge: alpha * local + (1 - alpha) * global
  // async_local_sgd
  AsyncUpdate async_update = AsyncUpdate::kDelayedNesterov;  // the server's update rule
  int buffer_size = 0;               // DN: N arrivals per momentum update; 0 = islands
  double dn_c = 0;                   // DN: activation c in [0, 1/N]
  bool dynamic_local_updates = true; // DyLU: local steps per task proportional to speed
  int64_t min_local_steps = 5;       // DyLU: floor on a task's local steps
  double grace_s = 0;                // grace window (seconds) to batch near-simultaneous
                                     // arrivals before restarting them from one model; 0 = off
  // demo (docs/algorithms.md §4)
  int64_t topk = 32;                 // k: DCT coefficients each island sends per block
  int64_t chunk = 64;                // s: a dimension d is cut into blocks of sc(d), the
                                     // largest divisor of d that is <= s (blocks <= s x s)
  double decay = 0.999;              // beta: decay of the momentum residual
                                     // (sparseloco: of the error-feedback accumulator)
  // sparseloco (docs/algorithms.md §13): topk, chunk and decay as above (its own defaults:
  // algorithm_keys()), outer_lr is the step alpha
  Aggregation aggregation = Aggregation::kMeanAll;  // mean over all islands, or per coordinate
                                                    // over the islands that selected it

  // The config keys, in the order the resolved config lists them.
  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("name", name);  // checked by the registry (check_options), which knows the names
    v.field("inner_steps", inner_steps, at_least(1));
    v.choice("outer_optimizer", outer.kind,
             {{"nesterov", OuterKind::kNesterov}, {"sgd", OuterKind::kSgd}, {"adam", OuterKind::kAdam}});
    v.field("outer_lr", outer.lr, above(0));
    v.field("outer_momentum", outer.momentum, closed_open(0, 1));
    v.field("outer_beta1", outer.beta1, closed_open(0, 1));
    v.field("outer_beta2", outer.beta2, closed_open(0, 1));
    v.field("outer_eps", outer.eps, above(0));
    v.choice("weighting", weight_by_shard, {{"uniform", false}, {"shard_size", true}});
    v.field("client_fraction", client_fraction, open_closed(0, 1));
    v.field("rounds", rounds, at_least(0));
    v.field("local_steps", local_steps, at_least(0));
    v.field("local_epochs", local_epochs, at_least(1));
    v.field("round_timeout_s", round_timeout_s, at_least(0));
    v.field("min_clients", min_clients, at_least(1));
    v.field("error_feedback", error_feedback);
    v.choice("overlap", overlap,
             {{"none", Overlap::kNone}, {"delayed", Overlap::kDelayed}, {"eager", Overlap::kEager}});
    v.field("fragments", fragments, at_least(1));
    v.choice("fragment_mode", fragment_mode,
             {{"strided", FragmentMode::kStrided}, {"sequential", FragmentMode::kSequential}});
    v.field("overlap_steps", overlap_steps, at_least(0));
    v.field("mix_alpha", mix_alpha, closed(0, 1));
    v.choice("async_update", async_update,
             {{"delayed_nesterov", AsyncUpdate::kDelayedNesterov}, {"naive", AsyncUpdate::kNaive}});
    v.field("buffer_size", buffer_size, at_least(0));
    v.field("dn_c", dn_c, closed(0, 1));
    v.field("dynamic_local_updates", dynamic_local_updates);
    v.field("min_local_steps", min_local_steps, at_least(1));
    v.field("grace_s", grace_s, at_least(0));
    v.field("topk", topk, at_least(1));
    v.field("chunk", chunk, closed(1, 256));
    v.field("decay", decay, closed(0, 1));
    v.choice("aggregation", aggregation,
             {{"mean_all", Aggregation::kMeanAll}, {"mean_selected", Aggregation::kMeanSelected}});
  }

  // The run, not config keys: filled from other sections (src/core/components.cpp).
  int islands = 1;               // configured number of islands (fedavg: clients K)
  uint64_t seed = 0;             // run.seed: fedavg client sampling
  int batch_size = 1;            // B = train.batch_size x grad_accum (local_epochs planning)
  std::vector<int64_t> shard_sizes;  // n_k of every client (fedavg planning)
  int64_t train_steps = 0;           // train.steps (async: each island's share of it)
  std::vector<double> speeds;        // compute speed factor of every island; empty = all 1
  double weight_decay = 0;           // train.weight_decay (demo: decoupled, p *= 1 - lr wd)
  std::string model;                 // model.name
  int model_blocks = 0;              // the model's transformer blocks (0: it has none)
  // DiLoCo per module of a run of several paths (docs/architecture.md "Runs of several
  // models"); inner_steps, the outer optimizer, weighting and error_feedback as for diloco. By
  // module id (ParamRange::module): the islands whose path goes through the module
  // (ascending), and how many paths do. norm_rescale: multiply a module's averaged outer
  // gradient by sqrt(paths through it). Filled from the path structure's section.
  std::vector<std::vector<int>> module_islands;
  std::vector<int> module_paths;
  bool norm_rescale = false;
  // The module of every block on every path: path_modules[p][b + 1] (b = -1: embeddings,
  // final norm, head). With more paths than `islands` (fewer islands than paths), island i
  // trains path (i + r * islands) mod P in round r and keeps every module's global
  // parameters; module_islands is then unused. Empty: island i trains path i mod P.
  std::vector<std::vector<int>> path_modules;
};

// The `algorithm:` keys each algorithm reads, besides `name`, in fields() order. A config that
// sets another key of the section for that algorithm is refused (src/config names the key's
// file and line and these keys): a key the algorithm never reads would be a silent no-op. The
// resolved config writes only these. A new algorithm adds its row here and its entry in
// algorithms/catalog.cpp and algorithms/registry.cpp (a test checks that the lists name the
// same algorithms).
// `defaults`: the algorithm's own default of a key it shares with others, as YAML text
// (src/config applies it when the config leaves the key out), e.g. an outer_lr of 1.0 where
// DiLoCo's is 0.7.
struct KeyDefault {
  const char* key;
  const char* value;
};
struct AlgorithmKeys {
  const char* name;
  std::vector<const char*> keys;
  std::vector<KeyDefault> defaults = {};
};

inline const std::vector<AlgorithmKeys>& algorithm_keys() {
  static const std::vector<AlgorithmKeys> table = [] {
    const std::vector<const char*> outer = {"outer_optimizer", "outer_lr",    "outer_momentum",
                                            "outer_beta1",     "outer_beta2", "outer_eps"};
    auto with_outer = [&](std::vector<const char*> before, std::vector<const char*> after) {
      before.insert(before.end(), outer.begin(), outer.end());
      before.insert(before.end(), after.begin(), after.end());
      return before;
    };
    return std::vector<AlgorithmKeys>{
        {"ddp", {}},
        {"diloco", with_outer({"inner_steps"}, {"weighting", "error_feedback", "overlap"})},
        {"fedavg", with_outer({}, {"client_fraction", "rounds", "local_steps", "local_epochs",
                                   "round_timeout_s", "min_clients", "error_feedback"})},
        {"streaming_diloco", with_outer({"inner_steps"}, {"weighting", "error_feedback", "fragments",
                                                          "fragment_mode", "overlap_steps", "mix_alpha"})},
        {"async_local_sgd", with_outer({"inner_steps"}, {"error_feedback", "async_update", "buffer_size",
                                                         "dn_c", "dynamic_local_updates", "min_local_steps",
                                                         "grace_s"})},
        {"demo", {"topk", "chunk", "decay"}},
        {"dipaco", with_outer({"inner_steps"}, {"weighting", "error_feedback"})},
        {"sparseloco", {"inner_steps", "outer_lr", "topk", "chunk", "decay", "aggregation"},
         {{"outer_lr", "1.0"}, {"topk", "64"}, {"decay", "0.95"}}},
    };
  }();
  return table;
}

// The row of algorithm `name` in algorithm_keys(); null for a name no row has.
inline const AlgorithmKeys* algorithm_row(const std::string& name) {
  for (const auto& row : algorithm_keys())
    if (name == row.name) return &row;
  return nullptr;
}

// The keys of algorithm `name` (see algorithm_keys()); null for a name no row has.
inline const std::vector<const char*>* keys_of_algorithm(const std::string& name) {
  const AlgorithmKeys* row = algorithm_row(name);
  return row ? &row->keys : nullptr;
}

// A rule of the options that does not hold ("algorithm.fragments", what is wrong).
using OptionProblem = KeyProblem;

// The rules make_algorithm and make_server would throw for, checked on the options alone
// (algorithms/catalog.cpp: each algorithm's check). Empty when they hold; an unknown name
// is a problem of "algorithm.name" that lists the valid names. Pure.
std::optional<OptionProblem> check_options(const AlgorithmOptions& options);

// The algorithm's part of building its options for a run, once the run fields after the
// config keys are filled (src/core/components.cpp): derives what the config leaves to the
// run (fedavg: rounds from train.steps) and checks the rules that need the run (streaming
// fragments against the model's blocks). A problem names the key; none for an unknown name
// (check_options reports it).
std::optional<OptionProblem> resolve_options(AlgorithmOptions& options);

}  // namespace atl::algorithms
