// The command line of atoll: every command and option, the same in the front end (`atoll`,
// src/cli/front.cpp, no libtorch) and the engine (`atoll-engine`, src/cli/main.cpp), so
// that both print the same help and refuse the same usage errors.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/core/export.h"
#include "src/core/validate.h"
#include "src/run/wan.h"
#include "src/sweep/plan.h"

namespace atl::cli {

struct SweepOptions {
  std::string path;           // the sweep file
  std::string root = "sweeps";  // sweeps/<name>/
  int jobs = 0;               // 0 = default_jobs
  bool dry_run = false;
  bool no_report = false;
  bool smoke = false;         // one tiny run per algorithm (sweep.smoke), into <root>/<name>-smoke/
  bool slurm = false;         // submit the unfinished runs as one Slurm job array
};

// The command line: every command's options, as the parser fills them, and the command run.
// Lives on main()'s stack (the parser holds references to its members). The parser is built
// here, without libtorch, for both programs (src/cli/front.cpp, src/cli/main.cpp); running
// a command (run() and below) is the engine's (main.cpp).
struct CommandLine {
  CommandLine() {
    app.require_subcommand(1);
    app.set_version_flag("--version", "atoll 0.1.0");
    add_run_commands();
    add_relay();
    add_tools();
  }
  void add_run_commands();
  void add_relay();
  void add_tools();
  // The chosen command's exit code; errors throw (main() maps them to exit codes).
  int run();
  // simulate, validate, coordinator, island, launch: the commands that take a CONFIG.
  int run_config_command();
  // What a command that takes a CONFIG is checked for (src/core/validate.h); nullopt for the
  // other commands.
  std::optional<atl::core::Target> config_target() const;
  // The --set overrides of CONFIG, with --resume's run.resume=true last.
  std::vector<std::string> config_sets() const;
  // `atoll island` without --id: the island of this Slurm task, and its device.
  void place_island(atl::config::Config& config);

  CLI::App app{"atoll: low-communication decentralized training"};
  CLI::App *simulate = nullptr, *validate = nullptr, *coordinator = nullptr, *island = nullptr, *launch = nullptr,
           *slurm = nullptr;
  CLI::App *relay = nullptr, *sweep_cmd = nullptr, *report = nullptr, *compare = nullptr, *export_cmd = nullptr,
           *keygen = nullptr;
  // simulate, validate and the real runs.
  std::string config_path;
  std::vector<std::string> sets;
  bool force = false, quiet = false, verbose = false, resume = false;
  int island_id = -1;
  int rank = 0;               // island: its rank in the island (islands.ranks)
  std::string rank0_host;     // island under Slurm: the node of its island's rank 0
  bool no_pickup = false;   // launch's first start of the coordinator (restarts pick the run up)
  bool supervised = false;  // started by launch: island processes that exited are reported on stdin
  bool ssh = false;
  bool submit = false, dry_run = false;  // slurm
  std::vector<std::string> peer_endpoints;
  bool emulate_wan = false;
  atl::run::WanOptions wan;
  // relay, sweep, report, compare, export, keygen.
  atl::run::RelayCommand relay_cmd;
  std::string relay_config;
  SweepOptions sweep_options;
  std::string sweep_dir;
  std::vector<std::string> run_dirs;
  atl::core::ExportOptions export_options;
  std::string key_dir, key_name;
};

// `atoll report`, `atoll compare` and a sweep's plan (`sweep --dry-run` without --slurm): the
// commands that only read and write files, answered alike by both programs. `check` checks
// each run's config (the engine's validate_config, the front end's check_config). Returns
// the exit code; nullopt for any other command. Errors throw, as run() does.
std::optional<int> run_file_command(CommandLine& cli, const std::function<void(const atl::config::Config&)>& check);

// The plan of sweep file `o.path`: every run resolved and checked with `check` (which throws
// on a refusal). Writes nothing.
atl::sweep::ExpandedSweep plan_sweep(const SweepOptions& o, const std::function<void(const atl::config::Config&)>& check);

// Inside a catch block: reports the exception being handled on stderr, as both programs do
// (docs/errors.md), and returns the exit code: 2 for a user error (atl::UserError), 1 for an
// output that could not be written or any other failure.
int report_failure();

// `atoll validate`'s line for a config that passed: "PATH: ok (diloco, 4 islands, gpt)\n".
std::string validated(const std::string& path, const atl::config::Config& config);

}  // namespace atl::cli
