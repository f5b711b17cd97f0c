// `atoll launch` for a run spread over machines (`hosts:` in the config): the command each
// host runs, as argv for ssh and as a line a user can paste.
#pragma once

#include <string>
#include <vector>

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
