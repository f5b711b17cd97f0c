// Which run a process belongs to. The coordinator of a real run refuses an island whose
// JOIN names another run (transport::CoordinatorOptions::run), so that an island started
// with another config, or one of another run that dials this run's port, is turned away
// with one line instead of training against a model it does not share.
#pragma once

#include <string>

#include "src/config/config.h"

namespace atl::run {

// The resolved config (config::flatten_yaml of config::to_yaml) as sorted "section.key: value"
// lines, without what may differ between the processes of one run: where each runs and what
// it reads and writes on its own host (run.out_dir, run.threads, run.device, run.resume,
// transport.coordinator, transport.host, transport.keys_dir, the data and init_from paths,
// checkpoint.dir and checkpoint.keep, the hosts section). Pure function.
std::string run_identity(const config::Config& config);

}  // namespace atl::run
