// `atoll`, the front end: the command line without libtorch. Loading libtorch takes about half
// a second here, more than everything else a short command does, so the front end answers
// what needs no libtorch itself (help, --version, usage errors, `validate` of a CPU config,
// `report`, `compare`, a sweep's plan) and hands every other command to the engine beside it, `atoll-engine` (src/cli/main.cpp),
// by exec: the same process id, arguments, environment and descriptors
// (docs/architecture.md "Front end and engine").
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "src/base/status.h"
#include "src/cli/command_line.h"
#include "src/config/config.h"
#include "src/core/validate.h"

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// atoll-engine in this executable's directory.
std::string engine_path() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string path = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string("atoll");
  return path.substr(0, path.rfind('/') + 1) + "atoll-engine";
}

[[noreturn]] void exec_engine(char** argv) {
  const std::string engine = engine_path();
  ::execv(engine.c_str(), argv);
  std::fprintf(stderr, "atoll: runtime failure: cannot start %s: %s (it is built beside atoll)\n", engine.c_str(),
               std::strerror(errno));
  ::_exit(kExitRuntime);
}

}  // namespace

int main(int argc, char** argv) {
  atl::cli::CommandLine cli;
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = cli.app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  // Whether a CUDA device is there, only libtorch can say: such a config goes to the engine.
  const auto check = [&](const atl::config::Config& config, atl::core::Target target) {
    if (config.run.device.rfind("cuda", 0) == 0) exec_engine(argv);
    atl::core::check_config(config, target, nullptr);
  };
  const auto check_run = [&](const atl::config::Config& config) { check(config, atl::core::Target::kSimulate); };
  try {
    if (*cli.validate) {
      const atl::config::Config config = atl::config::load_config(cli.config_path, cli.config_sets());
      check_run(config);
      std::fputs(atl::cli::validated(cli.config_path, config).c_str(), stdout);
      return 0;
    }
    if (const std::optional<int> rc = atl::cli::run_file_command(cli, check_run)) return *rc;
    // A config the engine would refuse is refused here, before libtorch loads: the same
    // checks, the same line (an island that finds its id in the Slurm task's environment
    // is placed, then checked, by the engine).
    if (const std::optional<atl::core::Target> target = cli.config_target(); target && !(*cli.island && cli.island_id < 0))
      check(atl::config::load_config(cli.config_path, cli.config_sets()), *target);
    if (*cli.sweep_cmd) atl::cli::plan_sweep(cli.sweep_options, check_run);
  } catch (...) {
    return atl::cli::report_failure();
  }
  exec_engine(argv);
}
