// The rules of a config that tie keys together, checked by parse_config once the file and
// every override are applied (each error names the place of the key it is about).
// Internal to atoll_config.
#pragma once

#include "src/config/config.h"

namespace atl::config {

// Throws atl::UserError "ORIGIN: key 'KEY': PROBLEM" for the first rule that does not hold:
// a key of another algorithm, model.dim % model.heads, per-island lists of the wrong length,
// unknown regions, malformed islands.events.
void check_cross_field(const Config& c);

}  // namespace atl::config
