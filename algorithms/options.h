// Options of the outer-loop algorithms, declared once: each algorithm's `algorithm:` keys are
// its own options struct's fields() (src/config reads and writes the chosen one through that
// list; this folder never sees YAML). AlgorithmOptions holds the chosen algorithm's name and
// struct, and the facts of the run it needs, filled by src/core/components.cpp from other
// sections.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
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

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.choice("outer_optimizer", kind,
             {{"nesterov", OuterKind::kNesterov}, {"sgd", OuterKind::kSgd}, {"adam", OuterKind::kAdam}});
    v.field("outer_lr", lr, above(0));
    v.field("outer_momentum", momentum, closed_open(0, 1));
    v.field("outer_beta1", beta1, closed_open(0, 1));
    v.field("outer_beta2", beta2, closed_open(0, 1));
    v.field("outer_eps", eps, above(0));
  }
};

// ---- Each algorithm's own options: its `algorithm:` keys, besides `name` -----------------
// One struct per algorithm, named by kName (the `algorithm.name` that chooses it), its keys
// in fields() in the order the resolved config writes them. A key another algorithm has and
// this one does not is refused for it (src/config names the file, line and these keys). Two
// algorithms that share a key give it the same rule (a test holds them to it); each may give
// it its own default (sparseloco's outer_lr is 1.0 where DiLoCo's is 0.7).

// The keys DiLoCo and its kin share: H and the outer optimizer; and weighting.
template <class V>
void round_fields(V& v, int64_t& inner_steps, OuterOptimizerOptions& outer) {
  v.field("inner_steps", inner_steps, fields::at_least(1));
  outer.fields(v);
}
template <class V>
void weighting_field(V& v, bool& weight_by_shard) {
  v.choice("weighting", weight_by_shard, {{"uniform", false}, {"shard_size", true}});
}

struct DdpOptions {
  static constexpr const char* kName = "ddp";
  template <class V>
  void fields(V&) {}
};

struct DilocoOptions {
  static constexpr const char* kName = "diloco";
  int64_t inner_steps = 50;          // H, inner steps per round
  OuterOptimizerOptions outer;       // outer_optimizer, outer_lr, ...
  bool weight_by_shard = false;      // weighting shard_size: each island weighs n_i / sum n (else 1)
  bool error_feedback = true;        // lossy codecs: carry each island's compression error into
                                     // its next exchange (residual added before encoding)
  Overlap overlap = Overlap::kNone;  // delayed / eager: the all-reduce of round t completes
                                     // at the end of round t+1 (docs/algorithms.md)
  template <class V>
  void fields(V& v) {
    round_fields(v, inner_steps, outer);
    weighting_field(v, weight_by_shard);
    v.field("error_feedback", error_feedback);
    v.choice("overlap", overlap,
             {{"none", Overlap::kNone}, {"delayed", Overlap::kDelayed}, {"eager", Overlap::kEager}});
  }
};

struct FedAvgOptions {
  static constexpr const char* kName = "fedavg";
  OuterOptimizerOptions outer;   // the server's optimizer over the averaged client update
  double client_fraction = 0.1;  // C: fraction of clients sampled per round (at least one)
  int64_t rounds = 0;            // R; 0 = derived: train.steps / local_steps
  int64_t local_steps = 0;       // inner steps per selected client per round; 0 = local_epochs
  int local_epochs = 1;          // E: passes over the shard when local_steps == 0
  double round_timeout_s = 0;    // a round's deadline after it opens (virtual s in simulate,
                                 // wall s in real runs): results not in by then are dropped; 0 = none
  int min_clients = 1;           // fewer results than this: the round is skipped (model unchanged)
  bool error_feedback = true;    // as DilocoOptions
  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    outer.fields(v);
    v.field("client_fraction", client_fraction, open_closed(0, 1));
    v.field("rounds", rounds, at_least(0));
    v.field("local_steps", local_steps, at_least(0));
    v.field("local_epochs", local_epochs, at_least(1));
    v.field("round_timeout_s", round_timeout_s, at_least(0));
    v.field("min_clients", min_clients, at_least(1));
    v.field("error_feedback", error_feedback);
  }
};

struct StreamingDilocoOptions {
  static constexpr const char* kName = "streaming_diloco";
  int64_t inner_steps = 50;          // H, as DilocoOptions
  OuterOptimizerOptions outer;
  bool weight_by_shard = false;
  bool error_feedback = true;
  int fragments = 2;                 // P: fragments of transformer blocks
  FragmentMode fragment_mode = FragmentMode::kStrided;  // how blocks are dealt to fragments
  int64_t overlap_steps = 1;         // tau: inner steps between a fragment's send and receive
  double mix_alpha = 0.5;            // merge: alpha * local + (1 - alpha) * global
  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    round_fields(v, inner_steps, outer);
    weighting_field(v, weight_by_shard);
    v.field("error_feedback", error_feedback);
    v.field("fragments", fragments, at_least(1));
    v.choice("fragment_mode", fragment_mode,
             {{"strided", FragmentMode::kStrided}, {"sequential", FragmentMode::kSequential}});
    v.field("overlap_steps", overlap_steps, at_least(0));
    v.field("mix_alpha", mix_alpha, closed(0, 1));
  }
};

struct AsyncLocalSgdOptions {
  static constexpr const char* kName = "async_local_sgd";
  int64_t inner_steps = 50;          // H: local steps of the fastest island per task
  OuterOptimizerOptions outer;       // the server's optimizer
  bool error_feedback = true;
  AsyncUpdate async_update = AsyncUpdate::kDelayedNesterov;  // the server's update rule
  int buffer_size = 0;               // DN: N arrivals per momentum update; 0 = islands
  double dn_c = 0;                   // DN: activation c in [0, 1/N]
  bool dynamic_local_updates = true; // DyLU: local steps per task proportional to speed
  int64_t min_local_steps = 5;       // DyLU: floor on a task's local steps
  double grace_s = 0;                // grace window (seconds) to batch near-simultaneous
                                     // arrivals before restarting them from one model; 0 = off
  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    round_fields(v, inner_steps, outer);
    v.field("error_feedback", error_feedback);
    v.choice("async_update", async_update,
             {{"delayed_nesterov", AsyncUpdate::kDelayedNesterov}, {"naive", AsyncUpdate::kNaive}});
    v.field("buffer_size", buffer_size, at_least(0));
    v.field("dn_c", dn_c, closed(0, 1));
    v.field("dynamic_local_updates", dynamic_local_updates);
    v.field("min_local_steps", min_local_steps, at_least(1));
    v.field("grace_s", grace_s, at_least(0));
  }
};

// The DCT top-k keys of demo and sparseloco.
template <class V>
void topk_fields(V& v, int64_t& topk, int64_t& chunk, double& decay) {
  v.field("topk", topk, fields::at_least(1));
  v.field("chunk", chunk, fields::closed(1, 256));
  v.field("decay", decay, fields::closed(0, 1));
}

struct DemoOptions {  // docs/algorithms.md §4
  static constexpr const char* kName = "demo";
  int64_t topk = 32;                 // k: DCT coefficients each island sends per block
  int64_t chunk = 64;                // s: a dimension d is cut into blocks of sc(d), the
                                     // largest divisor of d that is <= s (blocks <= s x s)
  double decay = 0.999;              // beta: decay of the momentum residual
  template <class V>
  void fields(V& v) {
    topk_fields(v, topk, chunk, decay);
  }
};

// DiLoCo per module of a run of several paths (docs/algorithms.md); its keys as DiLoCo's
// without overlap. The run's module structure is in AlgorithmOptions (module_islands, ...).
struct DipacoOptions {
  static constexpr const char* kName = "dipaco";
  int64_t inner_steps = 50;
  OuterOptimizerOptions outer;
  bool weight_by_shard = false;
  bool error_feedback = true;
  template <class V>
  void fields(V& v) {
    round_fields(v, inner_steps, outer);
    weighting_field(v, weight_by_shard);
    v.field("error_feedback", error_feedback);
  }
};

struct SparseLocoOptions {  // docs/algorithms.md §13
  static constexpr const char* kName = "sparseloco";
  int64_t inner_steps = 50;          // H, as DilocoOptions
  double outer_lr = 1.0;             // alpha: theta <- theta - alpha * mean of the messages
  int64_t topk = 64;                 // k: values each island sends per chunk x chunk block
  int64_t chunk = 64;                // the block side, as DemoOptions
  double decay = 0.95;               // beta: decay of the error-feedback accumulator
  Aggregation aggregation = Aggregation::kMeanAll;  // mean over all islands, or per coordinate
                                                    // over the islands that selected it
  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("inner_steps", inner_steps, at_least(1));
    v.field("outer_lr", outer_lr, above(0));
    topk_fields(v, topk, chunk, decay);
    v.choice("aggregation", aggregation,
             {{"mean_all", Aggregation::kMeanAll}, {"mean_selected", Aggregation::kMeanSelected}});
  }
};

// The options of whichever algorithm is chosen. A new algorithm adds its struct above and
// its alternative here, a row in algorithms/catalog.cpp and one in algorithms/registry.cpp (a
// test checks that the three name the same algorithms, in the same order).
using AlgorithmParams = std::variant<DdpOptions, DilocoOptions, FedAvgOptions, StreamingDilocoOptions,
                                     AsyncLocalSgdOptions, DemoOptions, DipacoOptions, SparseLocoOptions>;

// The default options of algorithm `name`; nullopt for a name no alternative has.
inline std::optional<AlgorithmParams> default_params(std::string_view name) {
  std::optional<AlgorithmParams> out;
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((name == std::variant_alternative_t<I, AlgorithmParams>::kName
          ? void(out.emplace(std::in_place_index<I>))
          : void()),
     ...);
  }(std::make_index_sequence<std::variant_size_v<AlgorithmParams>>{});
  return out;
}

// The names of the alternatives, in AlgorithmParams order.
inline std::vector<std::string> params_names() {
  std::vector<std::string> out;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (out.emplace_back(std::variant_alternative_t<I, AlgorithmParams>::kName), ...);
  }(std::make_index_sequence<std::variant_size_v<AlgorithmParams>>{});
  return out;
}

// Collects the keys of a fields() list, in order.
struct KeyNames {
  std::vector<std::string> out;
  template <class T>
  void field(const char* key, T&, const fields::Rule& = {}) {
    out.emplace_back(key);
  }
  template <class E>
  void choice(const char* key, E&, std::initializer_list<fields::Choice<E>>) {
    out.emplace_back(key);
  }
};

// The keys of `params`' algorithm, in fields() order (without `name`).
inline std::vector<std::string> params_keys(AlgorithmParams params) {
  KeyNames keys;
  std::visit([&](auto& p) { p.fields(keys); }, params);
  return std::move(keys.out);
}

struct AlgorithmOptions {
  std::string name = "diloco";   // the name of its catalog row (algorithms/catalog.cpp)
  // The chosen algorithm's own options: the alternative whose kName is `name` (src/config
  // keeps them in step; in code, of() sets both).
  AlgorithmParams params = DilocoOptions{};

  // This algorithm's options; throws std::logic_error when `name` chose another.
  template <class T>
  T& get() {
    if (T* p = std::get_if<T>(&params)) return *p;
    throw std::logic_error(std::string("algorithm '") + name + "' has no options of algorithm '" + T::kName + "'");
  }
  template <class T>
  const T& get() const {
    return const_cast<AlgorithmOptions*>(this)->get<T>();
  }
  // Options of the algorithm `own` is for, with the run fields at their defaults.
  template <class T>
  static AlgorithmOptions of(T own) {
    AlgorithmOptions o;
    o.name = T::kName;
    o.params = std::move(own);
    return o;
  }
  // Chooses algorithm `algorithm` with its default options; std::logic_error for a name no
  // alternative of AlgorithmParams has.
  void choose(std::string_view algorithm) {
    std::optional<AlgorithmParams> p = default_params(algorithm);
    if (!p) throw std::logic_error("no options for algorithm '" + std::string(algorithm) + "'");
    name = algorithm;
    params = std::move(*p);
  }
  // Inner steps per round of algorithms that count them (inner_steps); 1 for those that
  // exchange every step or plan their own rounds.
  int64_t round_steps() const {
    return std::visit(
        [](const auto& p) -> int64_t {
          if constexpr (requires { p.inner_steps; }) return p.inner_steps;
          else return 1;
        },
        params);
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
  // models"); inner_steps, the outer optimizer, weighting and error_feedback are DipacoOptions.
  // By module id (ParamRange::module): the islands whose path goes through the module
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
