// Where a process started by Slurm (`srun build/atoll island CONFIG`, one task per island,
// or one job-array element per island) stands in the run, read from the environment Slurm
// gives each task (docs/slurm.md). No `scontrol`: the hostlist syntax is parsed here.
//
// An island is one task today (islands.ranks is not a key yet); the placement already
// carries the island's rank and the host of its rank 0, which an island of several ranks
// rendezvouses on.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/config/config.h"
#include "src/run/processes.h"

namespace atl::run::slurm {

// A Slurm hostlist expanded in Slurm's order: "n[01-04,07],gpu7" -> n01 n02 n03 n04 n07
// gpu7. A range keeps the zero padding of its first bound; several bracket groups in one
// name give every combination, the last one varying fastest ("r[1-2]-n[1-2]" -> r1-n1
// r1-n2 r2-n1 r2-n2). kInvalidArgument names what is wrong and where.
StatusOr<std::vector<std::string>> expand_hostlist(const std::string& hostlist);

// SLURM_TASKS_PER_NODE expanded to one count per node: "2(x3),1" -> 2 2 2 1.
StatusOr<std::vector<int>> expand_tasks_per_node(const std::string& spec);

struct Placement {
  int island = 0;
  int rank = 0;             // within the island (0 while islands have one rank)
  int local_id = 0;         // SLURM_LOCALID: the task's index on its node
  std::string rank0_host;   // the node of the island's rank 0
  int restarts = 0;         // SLURM_RESTART_COUNT: > 0 for a requeued job (it rejoins)
  bool array = false;       // one job-array element per island (SLURM_ARRAY_TASK_ID)
};

// What the environment says, or std::nullopt when this is not a Slurm task (no
// SLURM_PROCID). `islands` and `ranks` are the config's; a task whose environment does not
// fit them (SLURM_NTASKS != islands x ranks, an array index beyond the islands) is a
// kInvalidArgument, a variable that is malformed or missing, or a distribution other than
// block, a kCorrupt; both name the variables. `getenv` is std::getenv but for tests.
using Getenv = std::function<const char*(const char*)>;
StatusOr<std::optional<Placement>> placement(int islands, int ranks, const Getenv& getenv);

// The device a task uses for `device` (run.device): "cuda" without an index is the task's
// own GPU, cuda:SLURM_LOCALID, unless Slurm bound the task to its GPUs already
// (CUDA_VISIBLE_DEVICES set: then the first visible one, cuda:0); anything else as given.
std::string task_device(const std::string& device, const Placement& p, const Getenv& getenv);

// `atoll slurm CONFIG`: the run as two batch scripts, a requeueable coordinator job and a job
// array of one element per island (`srun atoll island CONFIG`, placed by placement() above)
// that starts once the coordinator has, with the `slurm:` section's options. `dir` is
// where they are written: <run.out_dir>/<run.name>-slurm.
struct BatchScripts {
  std::string dir;
  std::string coordinator;
  std::string islands;
};
// `cwd`: the directory sbatch is run from (the jobs' working directory).
BatchScripts batch_scripts(const config::Config& config, const ProcessOptions& options, const std::string& cwd);

// The command: prints the scripts; writes them unless `dry_run`; with `submit`, submits them
// with sbatch and says how to follow the run. A missing sbatch is a UserError (nothing is
// submitted); a refused submission is exit code 1 with sbatch's message.
int run_slurm_command(const config::Config& config, const ProcessOptions& options, bool submit, bool dry_run);

// `atoll sweep FILE --slurm` (docs/sweeps.md "On Slurm"): the runs `ids` of the sweep in
// `sweep_dir` (prepared: configs/<id>.yaml written) as one job array, one `atoll simulate` of
// configs/<id>.yaml per element, at most `jobs` at a time (0: no limit), with the `slurm:`
// section of `base` (partition, account, time, extra lines, binary). Writes
// <sweep_dir>/slurm/{runs.txt,sweep.sbatch} and prints the script; unless `dry_run` writes
// and submits it and says how to follow it. A missing sbatch is a UserError before anything is written;
// a refused submission is exit code 1 with sbatch's message.
std::string sweep_batch_script(const config::Config& base, const std::string& sweep_dir, size_t runs, int jobs,
                               const std::string& cwd);
// `prepare` writes the sweep's plan and configs (called once sbatch is known to be there).
int submit_sweep(const config::Config& base, const std::string& sweep_dir, const std::vector<std::string>& ids,
                 int jobs, bool dry_run, const std::function<void()>& prepare);

}  // namespace atl::run::slurm
