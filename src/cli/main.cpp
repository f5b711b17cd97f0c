// The atoll command line. Only main() picks exit codes:
//   0 success, 1 runtime failure, 2 usage or config error (one clear line, no stack trace).
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/config/config.h"
#include "src/models/model.h"
#include "src/run/processes.h"
#include "src/sim/components.h"
#include "src/sim/simulator.h"

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// `name` must be one of `valid` (a registry's names), else a user error naming `key`.
void check_registered(const std::string& path, const std::string& key, const std::string& what,
                      const std::string& name, const std::vector<std::string>& valid) {
  if (std::find(valid.begin(), valid.end(), name) != valid.end()) return;
  std::string list;
  for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
  throw atl::UserError(path + ": key '" + key + "': unknown " + what + " '" + name +
                       "' (valid: " + list + ")");
}

// Checks what can be checked without running: the config itself, files it names, registry
// names (algorithm, model) and the compression pipeline.
atl::config::Config load_and_check(const std::string& path, const std::vector<std::string>& sets) {
  atl::config::Config c = atl::config::load_config(path, sets);
  atl::config::check_environment(c);
  check_registered(path, "algorithm.name", "algorithm", c.algorithm.name,
                   atl::algorithms::algorithm_names());
  check_registered(path, "model.name", "model", c.model.name, atl::models::model_names());
  atl::sim::make_pipeline(c);  // stage order and parameters
  return c;
}

}  // namespace

// Islands are threads that take turns computing; libgomp's default "active" waiting keeps
// the idle threads' OpenMP workers spinning on the cores the running island needs (measured:
// a 4-island quickstart step 2.3x slower). OMP_WAIT_POLICY is read when libgomp loads, before
// main(), so atoll sets it and re-executes itself once. A user's own setting wins.
void ensure_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

int main(int argc, char** argv) {
  ensure_passive_openmp_wait(argv);
  CLI::App app{"atoll: low-communication decentralized training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "atoll 0.1.0");

  std::string config_path;
  std::vector<std::string> sets;
  bool force = false, quiet = false, verbose = false;

  auto* simulate = app.add_subcommand("simulate", "run all islands of CONFIG in this process");
  simulate->add_option("config", config_path, "experiment YAML")->required();
  simulate->add_option("--set", sets, "override a key: --set algorithm.inner_steps=100 (repeatable)");
  simulate->add_flag("--force", force, "overwrite an existing run directory");
  simulate->add_flag("-q,--quiet", quiet, "no progress output");
  simulate->add_flag("-v,--verbose", verbose, "debug logging");

  auto* validate = app.add_subcommand("validate", "check CONFIG without running it");
  validate->add_option("config", config_path, "experiment YAML")->required();
  validate->add_option("--set", sets, "override a key (repeatable)");

  // Real runs: one coordinator and one process per island (or `launch` for all of them).
  int island_id = -1;
  auto* coordinator = app.add_subcommand("coordinator", "serve membership, rendezvous and the server role of CONFIG");
  auto* island = app.add_subcommand("island", "run island --id K of CONFIG");
  auto* launch = app.add_subcommand("launch", "start the coordinator and all islands of CONFIG on this machine");
  for (auto* sc : {coordinator, island, launch}) {
    sc->add_option("config", config_path, "experiment YAML")->required();
    sc->add_option("--set", sets, "override a key (repeatable)");
    sc->add_flag("-q,--quiet", quiet, "no progress output");
  }
  coordinator->add_flag("--force", force, "overwrite an existing run directory");
  launch->add_flag("--force", force, "overwrite an existing run directory");
  island->add_option("--id", island_id, "this island's id, 0 .. islands.count-1")->required();

  std::string key_dir, key_name;
  auto* keygen = app.add_subcommand("keygen", "write a CurveZMQ key pair DIR/NAME.key and DIR/NAME.pub");
  keygen->add_option("dir", key_dir, "directory for the key files")->required();
  keygen->add_option("--name", key_name, "coordinator or island-K")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  try {
    if (verbose) atl::set_log_level(atl::LogLevel::kDebug);
    if (*keygen) return atl::run::keygen(key_dir, key_name);
    atl::config::Config config = load_and_check(config_path, sets);
    atl::run::ProcessOptions popts;
    popts.force = force;
    popts.quiet = quiet;
    popts.config_path = config_path;
    popts.overrides = sets;
    if (*coordinator) return atl::run::run_coordinator(config, popts);
    if (*island) return atl::run::run_island(config, island_id, popts);
    if (*launch) return atl::run::launch(config, popts);
    if (*validate) {
      std::printf("%s: ok (%s, %d islands, %s)\n", config_path.c_str(), config.algorithm.name.c_str(),
                  config.islands.count, config.model.name.c_str());
      return 0;
    }
    atl::sim::SimulateOptions options;
    options.force = force;
    options.quiet = quiet;
    atl::sim::RunSummary s = atl::sim::simulate(config, options);
    std::printf("run %s: final val loss %.4f, %llu bytes sent, %.1f s\n", s.run_dir.c_str(),
                s.final_val_loss, static_cast<unsigned long long>(s.bytes_sent_total), s.wall_time_s);
    return 0;
  } catch (const atl::UserError& e) {
    std::fprintf(stderr, "atoll: error: %s\n", e.what());
    return kExitUsage;
  } catch (const c10::Error& e) {  // libtorch's checks: the message without its backtrace
    std::fprintf(stderr, "atoll: runtime failure: %s\n", e.what_without_backtrace());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "atoll: runtime failure: %s\n", e.what());
    return kExitRuntime;
  }
}
