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

// algorithm.name dipaco: `o`'s path modules, the islands of each module and the norm rescale;
// with islands.events that add islands to a run with fewer islands than paths, a UserError.
// Any other algorithm: a `dipaco:` section with levels is refused (UserError naming the key).
void dipaco_options(const config::Config& c, algorithms::AlgorithmOptions& o);

}  // namespace atl::core
