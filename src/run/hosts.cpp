#include "src/run/hosts.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "src/base/status.h"
#include "src/core/run_dir.h"

namespace atl::run {

bool coordinator_discovered(const config::Config& config) {
  return config.transport.coordinator.rfind("tcp://*:", 0) == 0;
}

std::string coordinator_address_file(const config::Config& config) {
  return (std::filesystem::path(config.run.out_dir) / config.run.name / "coordinator.address").string();
}

std::string own_node_name() {
  if (const char* node = std::getenv("SLURMD_NODENAME"); node != nullptr && *node != '\0') return node;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') return name;
  return "127.0.0.1";
}

bool island_host_discovered(const config::TransportConfig& transport) { return transport.host == "*"; }

std::string island_address(const config::TransportConfig& transport) {
  return island_host_discovered(transport) ? own_node_name() : transport.host;
}

void publish_coordinator_address(const config::Config& config) {
  const std::string host = own_node_name();
  const std::string port = config.transport.coordinator.substr(std::string("tcp://*:").size());
  std::filesystem::create_directories(std::filesystem::path(coordinator_address_file(config)).parent_path());
  core::write_file_atomic(coordinator_address_file(config), "tcp://" + host + ":" + port + "\n");
}

void withdraw_coordinator_address(const config::Config& config) {
  std::error_code ec;
  std::filesystem::remove(coordinator_address_file(config), ec);
}

std::string coordinator_address_in(const std::string& file) {
  std::ifstream in(file);
  std::string address;
  if (in && std::getline(in, address) && address.rfind("tcp://", 0) == 0) return address;
  return "";
}

StatusOr<std::string> read_coordinator_address(const config::Config& config,
                                               std::chrono::steady_clock::time_point deadline) {
  const std::string file = coordinator_address_file(config);
  for (;;) {
    if (std::string address = coordinator_address_in(file); !address.empty()) return address;
    if (std::chrono::steady_clock::now() >= deadline)
      return Status(StatusCode::kTimeout, "transport.coordinator is " + config.transport.coordinator + " but " + file +
                                              " names no coordinator (is its job running, on a file system this "
                                              "island shares?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

bool uses_hosts(const config::Config& config) {
  if (!config.hosts.coordinator.empty()) return true;
  for (const auto& h : config.hosts.islands)
    if (!h.empty()) return true;
  return false;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool loopback(const std::string& endpoint) {
  return endpoint.find("127.0.0.1") != std::string::npos || endpoint.find("localhost") != std::string::npos;
}

namespace {

// "user@host" -> "host".
std::string host_part(const std::string& destination) {
  const size_t at = destination.rfind('@');
  return at == std::string::npos ? destination : destination.substr(at + 1);
}

}  // namespace

std::vector<HostCommand> host_commands(const config::Config& config, const ProcessOptions& options) {
  const auto& hosts = config.hosts;
  bool remote_islands = false;
  for (const auto& h : hosts.islands) remote_islands = remote_islands || (!h.empty() && h != hosts.coordinator);
  if (remote_islands && loopback(config.transport.coordinator)) {
    throw UserError(config.source + ": key 'transport.coordinator': '" + config.transport.coordinator +
                    "' is a loopback address, but hosts.islands places islands on other machines "
                    "(use an address they can reach, e.g. tcp://" +
                    (hosts.coordinator.empty() ? std::string("<this host>") : host_part(hosts.coordinator)) +
                    ":29500)");
  }
  std::vector<std::string> common = {options.config_path};
  for (const auto& o : options.overrides) {
    common.push_back("--set");
    common.push_back(o);
  }
  common.push_back("--quiet");
  auto make = [&](std::string role, std::string host, std::vector<std::string> args) {
    HostCommand c{std::move(role), std::move(host), std::move(args), ""};
    if (!c.host.empty()) {
      c.remote = "cd " + shell_quote(hosts.workdir) + " && exec " + shell_quote(hosts.binary);
      for (const auto& a : c.atoll) c.remote.append(" ").append(shell_quote(a));
    }
    return c;
  };
  std::vector<HostCommand> out;
  std::vector<std::string> coord = {"coordinator"};
  coord.insert(coord.end(), common.begin(), common.end());
  if (options.force) coord.push_back("--force");
  // launch --ssh reports island processes that exit on the coordinator's stdin (ssh forwards
  // it); printed commands are run by hand, without a supervisor.
  if (options.ssh) coord.push_back("--supervised");
  out.push_back(make("coordinator", hosts.coordinator, coord));
  for (int i = 0; i < config.islands.count; ++i) {
    const std::string host = hosts.islands.empty() ? "" : hosts.islands[static_cast<size_t>(i)];
    std::vector<std::string> a = {"island"};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), {"--id", std::to_string(i)});
    if (!host.empty()) a.insert(a.end(), {"--set", "transport.host=" + host_part(host)});
    out.push_back(make("island " + std::to_string(i), host, a));
  }
  return out;
}

std::vector<std::string> ssh_argv(const HostCommand& c) {
  return {"ssh", "-o", "BatchMode=yes", c.host, c.remote};
}

}  // namespace atl::run
