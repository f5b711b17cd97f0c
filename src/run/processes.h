// Real multi-process runs: `atoll coordinator`, `atoll island`, `atoll launch`.
//
// The coordinator process owns runs/<name>/ (config.yaml, metrics.jsonl from every island's
// records, summary.json) and hosts the server role; each island process builds island K's
// data, model and algorithm as both modes do (src/core/island_parts.h), joins
// through transport/zmq/control_client.h and exchanges over ZeroMQ (transport/zmq/
// zmq_group.h) or Gloo (transport/gloo/gloo_group.h, transport.kind gloo). `launch`
// starts all of them on this machine as child processes.
//
// run_coordinator and launch return the process exit code (0 ok, 1 runtime failure; launch
// also kExitSurvivors);
// run_island returns its outcome as a Status (main exits 1 on a failure). User errors throw
// atl::UserError (exit code 2 in main).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "src/base/process.h"
#include "src/base/status.h"
#include "src/config/config.h"
#include "src/run/wan.h"

namespace atl::run {

// `atoll launch`'s exit code for a run that finished with the surviving islands after one
// or more died, were refused or never joined (docs/errors.md): not 0, which says every
// island finished, and not 1, a run that failed.
constexpr int kExitSurvivors = 3;

struct ProcessOptions {
  bool force = false;   // coordinator: overwrite an existing run directory
  bool no_pickup = false;  // coordinator: never pick up a running run (launch's first start;
                           // docs/checkpoints.md "Coordinator restart")
  bool supervised = false;  // coordinator: read its supervisor's reports of island processes
                            // that exited from stdin (docs/protocol.md "Supervisor reports")
  bool quiet = false;   // no progress output
  std::string config_path;            // launch: the config file the children read
  std::vector<std::string> overrides; // launch: --set overrides passed on to the children
  bool ssh = false;                   // launch with hosts: start remote processes over ssh
                                      // (without it, print the per-host commands)
  bool emulate_wan = false;           // launch: island traffic through relays (src/run/wan.h)
  WanOptions wan;                     // launch --emulate-wan: what the profile leaves open
  std::map<int, std::string> peer_endpoints;  // island: dial peer id at this endpoint instead
                                              // of the one it published (the link's relay)
  int rank = 0;        // island: this process's rank in its island (islands.ranks; docs/ranks.md)
  std::string rank0_host;  // island: the host of its island's rank 0 ("": transport.host)
  // launch: runs a child's command line (argv as main() gets it; returns its exit code) in a
  // fork of this process instead of executing atoll again, so that it starts with libtorch
  // loaded (about 0.5 s of CPU a process here); used while launch has one thread (not with
  // --emulate-wan, whose relays are threads). Empty: every child is executed.
  MainFunction warm;
};

// Each starts with core::validate_config for its target (src/core/validate.h).
int run_coordinator(const config::Config& config, const ProcessOptions& options);
// Runs island `island` until it finished its steps. Rejoins the run (with a state
// hand-over) when it was declared dead while cut off, up to transport.max_rejoins times.
// Errors: cannot reach the coordinator, cannot join or rejoin (kTimeout, kPeerLost,
// kUnavailable...); each message starts with "island K: ". Failures of the run itself
// mid-way (a collective that cannot complete) throw.
Status run_island(const config::Config& config, int island, const ProcessOptions& options);
int launch(const config::Config& config, const ProcessOptions& options);

// Writes a CurveZMQ key pair <dir>/<name>.key (secret, 0600) and <dir>/<name>.pub.
int keygen(const std::string& dir, const std::string& name);

}  // namespace atl::run
