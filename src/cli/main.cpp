// The atoll command line. Only main() picks exit codes:
//   0 success, 1 runtime failure, 2 usage or config error (one clear line, no stack trace);
//   `launch` also 3: the run finished with the surviving islands (src/run/processes.h).
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "src/base/log.h"
#include "src/base/process.h"
#include "src/cli/command_line.h"
#include "src/base/status.h"
#include "src/config/config.h"
#include "src/config/sweep_spec.h"
#include "src/run/processes.h"
#include "src/run/slurm.h"
#include "src/core/export.h"
#include "src/core/simulator.h"
#include "src/core/validate.h"
#include "src/sweep/compare.h"
#include "src/sweep/plan.h"
#include "src/sweep/report.h"
#include "src/sweep/runner.h"

namespace {

using atl::cli::CommandLine;
using atl::cli::SweepOptions;

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;  // a sweep stopped by SIGINT/SIGTERM (128 + SIGINT)

int run_command_line(int argc, char** argv);

// A command line run in a fork of this process (a sweep's runs, launch's children).
int run_in_fork(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return run_command_line(static_cast<int>(argv.size()), args.data());
}

// Parses CONFIG with its --set overrides and runs every check `target` needs before
// anything starts (src/core/validate.h).
atl::config::Config load_and_check(const std::string& path, const std::vector<std::string>& sets,
                                   atl::core::Target target) {
  atl::config::Config c = atl::config::load_config(path, sets);
  atl::core::validate_config(c, target);
  return c;
}


// `atoll sweep`: plan (every run resolved and checked), then run, then report.
int sweep(const SweepOptions& o) {
  const atl::sweep::ExpandedSweep plan = atl::cli::plan_sweep(
      o, [](const atl::config::Config& c) { atl::core::validate_config(c, atl::core::Target::kSimulate); });
  if (o.slurm) {  // docs/sweeps.md "On Slurm": -j is the array's concurrency limit
    if (o.dry_run) std::fputs(atl::sweep::plan_text(plan.plan).c_str(), stdout);
    std::vector<std::string> ids;
    for (const auto& r : plan.plan.runs)
      if (!atl::sweep::run_finished(plan.plan, r)) ids.push_back(r.id);
    return atl::run::slurm::submit_sweep(plan.configs.front(), plan.plan.dir, ids, o.jobs, o.dry_run,
                                         [&] { atl::sweep::prepare_runs(plan); });
  }
  atl::sweep::RunnerOptions runner;  // (a plan's dry run is run_file_command's)
  runner.jobs = o.jobs > 0 ? o.jobs : atl::sweep::default_jobs(plan);
  runner.warm = run_in_fork;  // `atoll simulate ...` in a fork of this one
  const atl::sweep::SweepOutcome outcome = atl::sweep::run_sweep(plan, runner);
  if (outcome.interrupted) return kExitInterrupted;
  std::printf("%s\n", atl::sweep::write_report(plan.plan.dir, !o.no_report).c_str());
  for (const auto& p : outcome.problems) std::fprintf(stderr, "atoll: sweep run %s\n", p.c_str());
  return outcome.failed + outcome.diverged > 0 ? kExitRuntime : 0;
}

}  // namespace

// Islands are threads that take turns computing; libgomp's default "active" waiting keeps
// the idle threads' OpenMP workers spinning on the cores the running island needs (measured:
// a 4-island quickstart step 2.3x slower). libgomp reads OMP_WAIT_POLICY in its initialiser,
// when it loads, before main(). A function in the executable's .preinit_array runs before any
// shared library's initialiser (the dynamic loader calls the program's pre-initialisers
// first), so atoll sets PASSIVE there, without re-executing itself. A user's own setting wins.
//
// The same goes for glibc's malloc arenas: by default every thread that allocates gets an
// arena of its own (up to 8 per core), and an arena keeps what its thread freed. A simulated
// island is a thread, so each island kept the peak of its own forward and backward
// (activations) for the whole run although only one island computes at a time: 4 quickstart
// islands peaked at 780 MiB, 448 MiB with two arenas, at the same speed (docs/simulator.md
// "Memory"). Two arenas: the islands' threads share their freed memory, and the main thread
// or a transport's threads rarely wait for a lock. A user's MALLOC_ARENA_MAX or
// GLIBC_TUNABLES wins.
namespace {
void process_defaults(int, char**, char**) {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr && std::getenv("GLIBC_TUNABLES") == nullptr)
    ::mallopt(M_ARENA_MAX, 2);
}
}  // namespace
__attribute__((section(".preinit_array"), used)) static void (*const kProcessDefaults)(int, char**, char**) =
    process_defaults;

namespace atl::cli {

int CommandLine::run() {
  if (verbose) atl::set_log_level(atl::LogLevel::kDebug);
  const auto check = [](const atl::config::Config& c) { atl::core::validate_config(c, atl::core::Target::kSimulate); };
  if (const std::optional<int> rc = run_file_command(*this, check)) return *rc;
  if (*keygen) return atl::run::keygen(key_dir, key_name);
  if (*sweep_cmd) return ::sweep(sweep_options);
  if (*export_cmd) {
    const atl::core::ExportResult r = atl::core::export_params(export_options);
    std::printf("%s: %lld tensors, %lld parameters from %s\n", r.out.c_str(), static_cast<long long>(r.tensors),
                static_cast<long long>(r.params), r.source.c_str());
    return 0;
  }
  if (*relay) {
    if (relay_config.empty()) return atl::run::run_relay(relay_cmd, nullptr);
    const atl::config::Config c = load_and_check(relay_config, sets, atl::core::Target::kRelay);
    return atl::run::run_relay(relay_cmd, &c);
  }
  return run_config_command();
}

void CommandLine::place_island(atl::config::Config& config) {
  const auto getenv = [](const char* name) -> const char* { return std::getenv(name); };
  const atl::config::PerIsland& ranks = config.islands.ranks;
  if (std::adjacent_find(ranks.values.begin(), ranks.values.end(), std::not_equal_to<>()) != ranks.values.end())
    atl::config::fail_key(config, "islands.ranks", "differs between islands; a Slurm task finds its island and rank only "
                                                   "when every island has the same number (start such islands with --id "
                                                   "and --rank)");
  auto p = atl::run::slurm::placement(config.islands.count, ranks.values.front(), getenv);
  if (!p.is_ok()) {
    if (p.status().code() == atl::StatusCode::kInvalidArgument)  // the run's shape
      atl::config::fail_key(config, "islands.count", "does not fit this Slurm task: " + p.status().message());
    throw atl::UserError("island: the Slurm task's environment: " + p.status().message());
  }
  if (!p.value()) throw atl::UserError("island: --id is required outside a Slurm task (SLURM_PROCID is not set)");
  const atl::run::slurm::Placement& at = *p.value();
  island_id = at.island;
  rank = at.rank;
  rank0_host = at.rank0_host;
  config.run.device = atl::run::slurm::task_device(config.run.device, at, getenv);
  ATOLL_INFO("island " << island_id << " from the Slurm task's environment" << (at.array ? " (job array)" : "")
                       << ", device " << config.run.device << (at.restarts > 0 ? ", requeued" : ""));
}

int CommandLine::run_config_command() {
  sets = config_sets();  // the island processes launch starts get them too
  atl::config::Config config = atl::config::load_config(config_path, sets);
  if (*island && island_id < 0) place_island(config);
  atl::core::validate_config(config, *config_target());
  atl::run::ProcessOptions popts;
  popts.force = force;
  popts.no_pickup = no_pickup;
  popts.supervised = supervised;
  popts.quiet = quiet;
  popts.config_path = config_path;
  popts.overrides = sets;
  popts.emulate_wan = emulate_wan;
  popts.ssh = ssh;
  popts.wan = wan;
  popts.rank = rank;
  popts.rank0_host = rank0_host;
  if (*launch && !emulate_wan) popts.warm = run_in_fork;
  for (const auto& p : peer_endpoints) {
    const auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0 || p.find_first_not_of("0123456789") < eq) {
      throw atl::UserError("--peer-endpoint " + p + ": expected ID=ENDPOINT, e.g. 1=tcp://127.0.0.1:40001");
    }
    popts.peer_endpoints[std::stoi(p.substr(0, eq))] = p.substr(eq + 1);
  }
  if (*coordinator) return atl::run::run_coordinator(config, popts);
  if (*island) {
    if (atl::Status st = atl::run::run_island(config, island_id, popts); !st.is_ok()) {
      ATOLL_ERROR(st.message() << " (" << atl::status_code_name(st.code()) << ")");
      return 1;
    }
    return 0;
  }
  if (*launch) return atl::run::launch(config, popts);
  if (*slurm) return atl::run::slurm::run_slurm_command(config, popts, submit, dry_run);
  if (*validate) {
    std::fputs(validated(config_path, config).c_str(), stdout);
    return 0;
  }
  atl::core::SimulateOptions options;
  options.force = force;
  options.quiet = quiet;
  atl::core::RunSummary s = atl::core::simulate(config, options);
  if (s.diverged) {
    std::fprintf(stderr, "atoll: run diverged: island %d's training loss is not finite at step %lld (%s)\n",
                 s.diverged_island, static_cast<long long>(s.diverged_step), s.run_dir.c_str());
    return kExitRuntime;
  }
  std::printf("run %s: final val loss %.4f, %llu bytes sent, %.1f s%s\n", s.run_dir.c_str(),
              s.final_val_loss, static_cast<unsigned long long>(s.bytes_sent_total), s.wall_time_s,
              atl::core::outcome_note(s.outcome).c_str());
  return 0;
}

}  // namespace atl::cli

namespace {

// main(): also what a sweep's forked child runs for each run (src/sweep/process.h).
int run_command_line(int argc, char** argv) {
  CommandLine cli;
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = cli.app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  try {
    return cli.run();
  } catch (const c10::Error& e) {  // libtorch's checks: the message without its backtrace
    std::fprintf(stderr, "atoll: runtime failure: %s\n", e.what_without_backtrace());
    return kExitRuntime;
  } catch (...) {
    return atl::cli::report_failure();  // the front end's mapping too (command_line.h)
  }
}

}  // namespace

// atoll-engine: every command, with libtorch loaded; `atoll` (src/cli/front.cpp) hands it
// the commands that need it.
int main(int argc, char** argv) {
  atl::init_process_title(argc, argv);
  return run_command_line(argc, argv);
}
