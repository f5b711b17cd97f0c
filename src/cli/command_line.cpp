// The command line's commands and options (command_line.h).
#include "src/cli/command_line.h"

#include <cstdio>

#include "src/config/sweep_spec.h"
#include "src/core/run_dir.h"
#include "src/sweep/compare.h"
#include "src/sweep/plan.h"
#include "src/sweep/report.h"

namespace atl::cli {

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
                     "(launch --emulate-wan: the relay of the link; repeatable). For a rank >= 1 of a "
                     "sharded exchange: the peer's rank of the same number, whose shard plane then binds "
                     "transport.base_port + rank x islands.count + island");

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

std::optional<atl::core::Target> CommandLine::config_target() const {
  // validate checks what simulate needs: it has no mode, and real runs refuse a few more
  // things (islands.events kills, transport settings), each with its own line.
  if (*coordinator) return atl::core::Target::kCoordinator;
  if (*island) return atl::core::Target::kIsland;
  if (*launch || *slurm) return atl::core::Target::kLaunch;
  if (*simulate || *validate) return atl::core::Target::kSimulate;
  return std::nullopt;
}

std::vector<std::string> CommandLine::config_sets() const {
  std::vector<std::string> s = sets;
  if (resume) s.push_back("run.resume=true");
  return s;
}

std::optional<int> run_file_command(CommandLine& cli, const std::function<void(const atl::config::Config&)>& check) {
  if (*cli.report) {
    std::printf("%s\n", atl::sweep::write_report(cli.sweep_dir).c_str());
    return 0;
  }
  if (*cli.compare) {
    std::fputs(atl::sweep::compare_table(cli.run_dirs).c_str(), stdout);
    return 0;
  }
  const SweepOptions& o = cli.sweep_options;
  if (*cli.sweep_cmd && o.dry_run && !o.slurm) {
    std::fputs(atl::sweep::plan_text(plan_sweep(o, check).plan).c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

atl::sweep::ExpandedSweep plan_sweep(const SweepOptions& o, const std::function<void(const atl::config::Config&)>& check) {
  return atl::sweep::expand(atl::config::load_sweep_spec(o.path), o.root, check, o.smoke);
}

int report_failure() {
  try {
    throw;
  } catch (const atl::UserError& e) {
    std::fprintf(stderr, "atoll: error: %s\n", e.what());
    return 2;
  } catch (const atl::core::OutputError& e) {  // an output that could not be written
    std::fprintf(stderr, "atoll: run failed: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "atoll: runtime failure: %s\n", e.what());
    return 1;
  }
}

std::string validated(const std::string& path, const atl::config::Config& config) {
  const int n = config.islands.count;
  return path + ": ok (" + config.algorithm.name + ", " + std::to_string(n) + " island" + (n == 1 ? "" : "s") +
         ", " + config.model.name + ")\n";
}

}  // namespace atl::cli
