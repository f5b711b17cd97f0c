// DiPaCo's options of a run (docs/dipaco.md): the path structure from the `dipaco:` section
// and the model's blocks, and what the algorithm's options take from them. Compiled into
// atoll_core (src/dipaco/run/).
#pragma once

#include "algorithms/options.h"
#include "src/config/config.h"
#include "src/dipaco/paths.h"

namespace atl::core {

// The path structure of a DiPaCo run (algorithm.name: dipaco), from the `dipaco:` section and
// the model's blocks; island i trains path i % paths(). Throws UserError naming the key when
// the section does not describe paths of this model.
dipaco::Paths dipaco_paths(const config::Config& config);

// The paths of the run: P for a DiPaCo run, 0 for a dense one (one model).
int run_paths(const config::Config& config);

// The loss window's default (data.loss_after -1): dipaco.prefix in a DiPaCo run that routes
// its data, else 0 (every token).
int default_loss_after(const config::Config& config);

// The rules of dipaco.reshard_at that the config alone decides (a routed DiPaCo run, an
// outer-round boundary before the last step, no checkpoints): UserError naming the key.
void check_path_keys(const config::Config& config);

// algorithm.name dipaco: `o`'s path modules, the islands of each module and the norm rescale;
// with islands.events that add islands to a run with fewer islands than paths, a UserError.
// Any other algorithm: a `dipaco:` section with levels is refused (UserError naming the key).
void path_options(const config::Config& c, algorithms::AlgorithmOptions& o);

}  // namespace atl::core
