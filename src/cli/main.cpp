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

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;  // a sweep stopped by SIGINT/SIGTERM (128 + SIGINT)

int run_command_line(int argc, char** argv);

// Parses CONFIG with its --set overrides and runs every check `target` needs before
// anything starts (src/core/validate.h).
atl::config::Config load_and_check(const std::string& path, const std::vector<std::string>& sets,
                                   atl::core::Target target) {
  atl::config::Config c = atl::config::load_config(path, sets);
  atl::core::validate_config(c, target);
  return c;
}

struct SweepOptions {
  std::string path;           // the sweep file
  std::string root = "sweeps";  // sweeps/<name>/
  int jobs = 0;               // 0 = default_jobs
  bool dry_run = false;
  bool no_report = false;
  bool smoke = false;         // one tiny run per algorithm (sweep.smoke), into <root>/<name>-smoke/
  bool slurm = false;         // submit the unfinished runs as one Slurm job array
};

// `atoll sweep`: plan (every run resolved and checked), then run, then report.
int sweep(const SweepOptions& o) {
  const atl::config::SweepSpec spec = atl::config::load_sweep_spec(o.path);
  const atl::sweep::ExpandedSweep plan = atl::sweep::expand(
      spec, o.root, [](const atl::config::Config& c) { atl::core::validate_config(c, atl::core::Target::kSimulate); },
      o.smoke);
  if (o.slurm) {  // docs/sweeps.md "On Slurm": -j is the array's concurrency limit
    if (o.dry_run) std::fputs(atl::sweep::plan_text(plan.plan).c_str(), stdout);
    std::vector<std::string> ids;
    for (const auto& r : plan.plan.runs)
      if (!atl::sweep::run_finished(plan.plan, r)) ids.push_back(r.id);
    return atl::run::slurm::submit_sweep(plan.configs.front(), plan.plan.dir, ids, o.jobs, o.dry_run,
                                         [&] { atl::sweep::prepare_runs(plan); });
  }
  if (o.dry_run) {
    std::fputs(atl::sweep::plan_text(plan.plan).c_str(), stdout);
    return 0;
  }
  atl::sweep::RunnerOptions runner;
  runner.jobs = o.jobs > 0 ? o.jobs : atl::sweep::default_jobs(plan);
  runner.warm = [](const std::vector<std::string>& argv) {  // `atoll simulate ...` in a fork of this one
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    return run_command_line(static_cast<int>(argv.size()), args.data());
  };
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

namespace {

// The command line: every command's options, as the parser fills them, and the command run.
// Lives on main()'s stack (the parser holds references to its members).
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

void CommandLine::add_run_commands() {
  simulate = app.add_subcommand("simulate", "run all islands of CONFIG in this process");
  simulate->add_option("config", config_path, "experiment YAML")->required();
  simulate->add_option("--set", sets, "override a key: --set algorithm.inner_steps=100 (repeatable)");
  simulate->add_flag("--force", force, "overwrite an existing run directory");
  simulate->add_flag("--resume", resume, "continue the run from its newest usable checkpoint (run.resume; "
                                         "docs/checkpoints.md)");
  simulate->add_flag("-q,--quiet", quiet, "no progress output");
  simulate->add_flag("-v,--verbose", verbose, "debug logging");

  validate = app.add_subcommand("validate", "check CONFIG without running it");
  validate->add_option("config", config_path, "experiment YAML")->required();
  validate->add_option("--set", sets, "override a key (repeatable)");

  // Real runs: one coordinator and one process per island (or `launch` for all of them).
  coordinator = app.add_subcommand("coordinator", "serve membership, rendezvous and the server role of CONFIG");
  island = app.add_subcommand("island", "run island --id K of CONFIG");
  launch = app.add_subcommand("launch", "start the coordinator and all islands of CONFIG on this machine");
  for (auto* sc : {coordinator, island, launch}) {
    sc->add_option("config", config_path, "experiment YAML")->required();
    sc->add_option("--set", sets, "override a key (repeatable)");
    sc->add_flag("-q,--quiet", quiet, "no progress output");
  }
  launch->footer("Exit codes: 0 every island finished; 3 the run finished with the surviving islands after "
                 "others died, were refused or never joined (one line names them); 1 the run failed; "
                 "2 usage or config error; 130 interrupted (docs/errors.md).");
  for (auto* sc : {coordinator, island, launch}) {
    sc->add_flag("--resume", resume, "continue the run from the newest checkpoint that the coordinator and every "
                                     "island hold (run.resume; docs/checkpoints.md \"Real runs\")");
  }
  coordinator->add_flag("--force", force, "overwrite an existing run directory");
  coordinator->add_flag("--no-pickup", no_pickup, "never pick up a running run of this run directory")->group("");
  coordinator->add_flag("--supervised", supervised, "read 'exited ID HOW' lines from stdin (atoll launch)")->group("");
  launch->add_flag("--force", force, "overwrite an existing run directory");
  launch->add_flag("--ssh", ssh, "with a hosts: section, start the processes on their hosts over ssh "
                                 "(default: print the per-host commands)");
  island->add_option("--id", island_id, "this island's id, 0 .. islands.count-1 (default under srun: the Slurm "
                                        "task's, docs/slurm.md)");
  island->add_option("--rank", rank, "this process's rank in its island, 0 .. islands.ranks-1 (docs/ranks.md; "
                                     "default under srun: the Slurm task's)");
  slurm = app.add_subcommand("slurm", "write the batch scripts of CONFIG for Slurm: a coordinator job and an island "
                                      "job array (docs/slurm.md); --submit submits them");
  slurm->add_option("config", config_path, "experiment YAML")->required();
  slurm->add_option("--set", sets, "override a key (repeatable; the jobs get it too)");
  slurm->add_flag("--submit", submit, "submit the scripts with sbatch and say how to follow the run");
  slurm->add_flag("--dry-run", dry_run, "print the scripts only; write nothing");
  island->add_option("--peer-endpoint", peer_endpoints,
                     "ID=ENDPOINT: dial peer ID at ENDPOINT instead of the endpoint it published "
                     "(launch --emulate-wan: the relay of the link; repeatable)");

}

void CommandLine::add_relay() {
  // WAN emulation (docs/wan-emulation.md): launch through relays, or one relay by hand.
  launch->add_flag("--emulate-wan", emulate_wan,
                   "route island traffic through relays that impose the network: profile "
                   "(latency, jitter, rates, loss stalls, partitions)");
  launch->add_flag("--wan-blackhole", wan.blackhole, "--emulate-wan: partitions stop forwarding (default: reset connections)");
  launch->add_flag("--wan-random-loss", wan.random_loss, "--emulate-wan: draw losses per packet (default: evenly spaced)");
  launch->add_option("--wan-stall-every-s", wan.stall_every_s, "--emulate-wan: a stall on every link this often");
  launch->add_option("--wan-stall-s", wan.stall_s, "--emulate-wan: length of those stalls");
  relay = app.add_subcommand("relay", "forward one TCP port like a WAN link: latency, jitter, rate cap, "
                                            "loss stalls, cuts (docs/wan-emulation.md); Ctrl-C stops it");
  relay->add_option("--listen", relay_cmd.listen, "HOST:PORT to accept on (default 127.0.0.1:0: a free port, printed)");
  relay->add_option("--to", relay_cmd.to, "HOST:PORT to forward to (with --config: default the --to-island endpoint)");
  relay->add_option("--config", relay_config, "take the link from this config's network: section and partitions");
  relay->add_option("--set", sets, "override a key of --config (repeatable)");
  relay->add_option("--from", relay_cmd.from, "with --config: the island that dials (-1: the coordinator)");
  relay->add_option("--to-island", relay_cmd.to_endpoint, "with --config: the island dialled (-1: the coordinator)");
  relay->add_option("--latency-ms", relay_cmd.latency_ms, "one-way latency, each direction");
  relay->add_option("--jitter-ms", relay_cmd.jitter_ms, "extra latency, uniform in [0, J] per chunk (order kept)");
  relay->add_option("--bandwidth-mbps", relay_cmd.bandwidth_mbps, "rate cap, each direction (Mbit/s)");
  relay->add_option("--loss", relay_cmd.loss, "probability that a 1460-byte packet is lost; each loss stalls the stream one RTT");
  relay->add_flag("--random-loss", relay_cmd.wan.random_loss, "draw losses per packet (default: evenly spaced, the mean rate)");
  relay->add_option("--cut-at-s", relay_cmd.cut_at_s, "cut the link this many seconds after the start");
  relay->add_option("--cut-for-s", relay_cmd.cut_for_s, "for this long");
  relay->add_flag("--blackhole", relay_cmd.wan.blackhole, "a cut stops forwarding and keeps connections (default: resets them)");
  relay->add_option("--stall-every-s", relay_cmd.wan.stall_every_s, "stall both directions this often");
  relay->add_option("--stall-s", relay_cmd.wan.stall_s, "for this long each time");

}

void CommandLine::add_tools() {
  sweep_cmd = app.add_subcommand("sweep", "run every run of SWEEP.yaml (docs/sweeps.md); resumes where it stopped");
  sweep_cmd->add_option("sweep", sweep_options.path, "sweep YAML: a config plus a sweep: section")->required();
  sweep_cmd->add_option("-j,--jobs", sweep_options.jobs, "runs at a time (default: cores / run.threads)")
      ->check(CLI::PositiveNumber);
  sweep_cmd->add_flag("--dry-run", sweep_options.dry_run, "print the plan (runs, done or to run) and stop");
  sweep_cmd->add_flag("--no-report", sweep_options.no_report, "tables only: no plots or report.html at the end");
  sweep_cmd->add_flag("--smoke", sweep_options.smoke,
                      "check the file: one tiny run per algorithm, its sweep.smoke keys set, into <out>/<name>-smoke/");
  sweep_cmd->add_option("--out", sweep_options.root, "parent of sweep directories (default: sweeps)");
  sweep_cmd->add_flag("--slurm", sweep_options.slurm, "submit the runs not finished yet as one Slurm job array (-j: "
                                                      "how many at a time; docs/sweeps.md); with --dry-run print it");

  report = app.add_subcommand("report", "tables, plots and report.html of a sweep directory");
  report->add_option("sweep_dir", sweep_dir, "sweeps/<name>")->required();
  compare = app.add_subcommand("compare", "a table of runs: the keys that differ, then their results");
  compare->add_option("runs", run_dirs, "run directories (or sweep directories: all their runs)")->required();

  export_cmd = app.add_subcommand("export", "write a run's final (or a checkpoint's) parameters as a file "
                                                  "PyTorch loads with torch.load (docs/checkpoints.md)");
  export_cmd->add_option("run_dir", export_options.run_dir, "runs/<name>")->required();
  export_cmd->add_option("--format", export_options.format, "pt (a dict of parameter name -> tensor)");
  export_cmd->add_option("--checkpoint", export_options.checkpoint, "a checkpoint file instead of final_params.bin");
  export_cmd->add_option("--path", export_options.path, "a run of several paths: path P's parameters (final_params.path<P>.bin)")
      ->check(CLI::NonNegativeNumber);
  export_cmd->add_option("--out", export_options.out, "the file to write (default RUN_DIR/final_params.pt, or "
                                                      "RUN_DIR/step-S.pt for a checkpoint)");

  keygen = app.add_subcommand("keygen", "write a CurveZMQ key pair DIR/NAME.key and DIR/NAME.pub");
  keygen->add_option("dir", key_dir, "directory for the key files")->required();
  keygen->add_option("--name", key_name, "coordinator or island-K")->required();
}

int CommandLine::run() {
  if (verbose) atl::set_log_level(atl::LogLevel::kDebug);
  if (*keygen) return atl::run::keygen(key_dir, key_name);
  if (*sweep_cmd) return sweep(sweep_options);
  if (*export_cmd) {
    const atl::core::ExportResult r = atl::core::export_params(export_options);
    std::printf("%s: %lld tensors, %lld parameters from %s\n", r.out.c_str(), static_cast<long long>(r.tensors),
                static_cast<long long>(r.params), r.source.c_str());
    return 0;
  }
  if (*report) {
    std::printf("%s\n", atl::sweep::write_report(sweep_dir).c_str());
    return 0;
  }
  if (*compare) {
    std::fputs(atl::sweep::compare_table(run_dirs).c_str(), stdout);
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
  // validate checks what simulate needs: it has no mode, and real runs refuse a few more
  // things (islands.events kills, transport settings), each with its own line.
  const atl::core::Target target = *coordinator ? atl::core::Target::kCoordinator
                                  : *island    ? atl::core::Target::kIsland
                                  : *launch || *slurm ? atl::core::Target::kLaunch
                                               : atl::core::Target::kSimulate;
  if (resume) sets.push_back("run.resume=true");
  atl::config::Config config = atl::config::load_config(config_path, sets);
  if (*island && island_id < 0) place_island(config);
  atl::core::validate_config(config, target);
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
    std::printf("%s: ok (%s, %d island%s, %s)\n", config_path.c_str(), config.algorithm.name.c_str(),
                config.islands.count, config.islands.count == 1 ? "" : "s", config.model.name.c_str());
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
  } catch (const atl::UserError& e) {
    std::fprintf(stderr, "atoll: error: %s\n", e.what());
    return kExitUsage;
  } catch (const atl::core::OutputError& e) {  // an output the run could not write (docs/errors.md)
    std::fprintf(stderr, "atoll: run failed: %s\n", e.what());
    return kExitRuntime;
  } catch (const c10::Error& e) {  // libtorch's checks: the message without its backtrace
    std::fprintf(stderr, "atoll: runtime failure: %s\n", e.what_without_backtrace());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "atoll: runtime failure: %s\n", e.what());
    return kExitRuntime;
  }
}

}  // namespace

int main(int argc, char** argv) { return run_command_line(argc, argv); }
