// `atoll launch` for a run spread over machines (`hosts:` in the config): the command each
// host runs, as argv for ssh and as a line a user can paste.
#pragma once

#include <string>
#include <vector>

#include <chrono>

#include "src/base/status.h"
#include "src/config/config.h"
#include "src/run/processes.h"

namespace atl::run {

struct HostCommand {
  std::string role;               // "coordinator", "island 2"
  std::string host;               // ssh destination; "" = this machine
  std::vector<std::string> atoll; // the atoll arguments (after the binary)
  std::string remote;             // host != "": the shell command for ssh, quoted
};

// Whether `endpoint` (tcp://HOST:PORT) names this machine's loopback address.
bool loopback(const std::string& endpoint);

// transport.coordinator "tcp://*:PORT" (docs/slurm.md "The coordinator's address"): the
// coordinator binds every interface and writes the address islands dial, tcp://HOST:PORT
// (HOST: SLURMD_NODENAME, else this machine's name), to <run dir>/coordinator.address, where
// the islands read it (the run directory on a file system they share); it removes the file
// when the run ends.
bool coordinator_discovered(const config::Config& config);
std::string coordinator_address_file(const config::Config& config);
void publish_coordinator_address(const config::Config& config);
void withdraw_coordinator_address(const config::Config& config);
// The address `file` (coordinator_address_file) names now; "" when it names none. Does not wait.
std::string coordinator_address_in(const std::string& file);
// An island's side: waits until `deadline` for the file; kTimeout naming it.
StatusOr<std::string> read_coordinator_address(const config::Config& config,
                                               std::chrono::steady_clock::time_point deadline);

// This node's name as other nodes reach it: SLURMD_NODENAME, else the machine's name, else
// 127.0.0.1.
std::string own_node_name();

// transport.host "*" (docs/slurm.md "Islands on several nodes"): an island binds its data
// socket on every interface and publishes tcp://<its node>:PORT, and its ranks' c10d and a
// gloo island's pairs use its node's name; so each island (and each rank) has the address of
// the node it runs on, wherever the scheduler put it. Otherwise transport.host itself.
bool island_host_discovered(const config::TransportConfig& transport);
std::string island_address(const config::TransportConfig& transport);

// Whether the config places any process on another machine.
bool uses_hosts(const config::Config& config);

// The coordinator's and every island's command. Island K binds its data sockets on the host
// part of hosts.islands[K] (transport.host otherwise). Throws UserError when
// transport.coordinator is a loopback address while islands run elsewhere.
std::vector<HostCommand> host_commands(const config::Config& config, const ProcessOptions& options);

// `ssh <host> <remote>` (batch mode: never prompts) for one command.
std::vector<std::string> ssh_argv(const HostCommand& c);

// POSIX shell quoting: 'it'\''s'.
std::string shell_quote(const std::string& s);

}  // namespace atl::run
