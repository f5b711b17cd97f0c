#include "src/run/slurm.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "src/base/log.h"
#include "src/run/hosts.h"

namespace atl::run::slurm {
namespace {

// A hostlist with more names than this is refused rather than expanded.
constexpr size_t kMaxHosts = 1 << 20;

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// `text` split at the commas outside brackets.
std::vector<std::string> split_top(const std::string& text) {
  std::vector<std::string> parts(1);
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.emplace_back();
      continue;
    }
    parts.back() += c;
  }
  return parts;
}

// "01-04,07" -> 01 02 03 04 07 (padding of each range's first bound).
Status expand_group(const std::string& group, const std::string& where, std::vector<std::string>* out) {
  size_t start = 0;
  while (start <= group.size()) {
    const size_t comma = group.find(',', start);
    const std::string range = group.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      return invalid_argument("hostlist '" + where + "': '" + range + "' is not a number or a range like 01-04");
    const int64_t a = std::stoll(lo), b = std::stoll(hi);
    if (b < a) return invalid_argument("hostlist '" + where + "': range '" + range + "' runs backwards");
    if (static_cast<size_t>(b - a) >= kMaxHosts) return invalid_argument("hostlist '" + where + "': range '" + range + "' is too long");
    for (int64_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out->push_back(std::move(s));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return Status::ok();
}

// One name of the list, its bracket groups expanded (the last one varying fastest).
Status expand_name(const std::string& name, std::vector<std::string>* out) {
  std::vector<std::string> names = {""};
  size_t at = 0;
  while (at < name.size()) {
    const size_t open = name.find('[', at);
    const std::string literal = name.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (literal.find(']') != std::string::npos) return invalid_argument("hostlist '" + name + "': ']' without '['");
    for (auto& n : names) n += literal;
    if (open == std::string::npos) break;
    const size_t close = name.find(']', open);
    if (close == std::string::npos) return invalid_argument("hostlist '" + name + "': '[' without ']'");
    const std::string group = name.substr(open + 1, close - open - 1);
    if (group.find('[') != std::string::npos) return invalid_argument("hostlist '" + name + "': nested '['");
    std::vector<std::string> values;
    if (Status st = expand_group(group, name, &values); !st.is_ok()) return st;
    if (names.size() * values.size() > kMaxHosts) return invalid_argument("hostlist '" + name + "' names too many hosts");
    std::vector<std::string> product;
    for (const auto& n : names)
      for (const auto& v : values) product.push_back(n + v);
    names = std::move(product);
    at = close + 1;
  }
  if (names.size() == 1 && names[0].empty()) return invalid_argument("hostlist: an empty name");
  out->insert(out->end(), names.begin(), names.end());
  return Status::ok();
}

// An environment variable Slurm sets that is missing or malformed, or a srun option atoll
// cannot place islands under: not the config's fault (placement() in slurm.h).
Status bad_env(std::string msg) { return {StatusCode::kCorrupt, std::move(msg)}; }

// The integer in variable `name`, or an error naming it.
StatusOr<int64_t> integer(const Getenv& getenv, const char* name) {
  const char* v = getenv(name);
  if (v == nullptr) return bad_env(std::string(name) + " is not set");
  const std::string s = v;
  if (!all_digits(s) || s.size() > 9) return bad_env(std::string(name) + "='" + s + "' is not a non-negative integer");
  return std::stoll(s);
}

const char* first_set(const Getenv& getenv, std::initializer_list<const char*> names, const char** which) {
  for (const char* n : names) {
    if (const char* v = getenv(n)) {
      *which = n;
      return v;
    }
  }
  return nullptr;
}

// The node of task `task` under the block distribution of `nodes` with `per_node` tasks.
StatusOr<std::string> host_of_task(const Getenv& getenv, int64_t task) {
  const char *nodes_var = "", *tasks_var = "";
  const char* nodes = first_set(getenv, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &nodes_var);
  const char* per_node = first_set(getenv, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tasks_var);
  if (nodes == nullptr) return std::string();  // not known: only islands of several ranks need it
  auto hosts = expand_hostlist(nodes);
  if (!hosts.is_ok()) return bad_env(std::string(nodes_var) + ": " + hosts.status().message());
  if (per_node == nullptr) {
    if (task == 0) return hosts.value()[0];
    return bad_env(std::string(nodes_var) + " is set but not SLURM_TASKS_PER_NODE");
  }
  auto counts = expand_tasks_per_node(per_node);
  if (!counts.is_ok()) return bad_env(std::string(tasks_var) + ": " + counts.status().message());
  if (counts.value().size() != hosts.value().size()) {
    return bad_env(std::string(tasks_var) + "='" + per_node + "' counts " +
                            std::to_string(counts.value().size()) + " nodes but " + nodes_var + "='" + nodes +
                            "' names " + std::to_string(hosts.value().size()));
  }
  int64_t first = 0;
  for (size_t n = 0; n < counts.value().size(); ++n) {
    first += counts.value()[n];
    if (task < first) return hosts.value()[n];
  }
  return bad_env("task " + std::to_string(task) + " is beyond the " + std::to_string(first) + " tasks of " +
                          tasks_var + "='" + per_node + "'");
}

}  // namespace

StatusOr<std::vector<std::string>> expand_hostlist(const std::string& hostlist) {
  if (hostlist.empty()) return invalid_argument("hostlist: empty");
  std::vector<std::string> out;
  for (const std::string& part : split_top(hostlist)) {
    if (Status st = expand_name(part, &out); !st.is_ok()) return st;
    if (out.size() > kMaxHosts) return invalid_argument("hostlist '" + hostlist + "' names too many hosts");
  }
  return out;
}

StatusOr<std::vector<int>> expand_tasks_per_node(const std::string& spec) {
  std::vector<int> out;
  for (const std::string& part : split_top(spec)) {
    const size_t paren = part.find('(');
    const std::string count = part.substr(0, paren);
    std::string times = "1";
    if (paren != std::string::npos) {
      if (part.size() < paren + 4 || part.compare(paren, 2, "(x") != 0 || part.back() != ')')
        return invalid_argument("'" + part + "' is not COUNT or COUNT(xNODES)");
      times = part.substr(paren + 2, part.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(times) || count.size() > 6 || times.size() > 6)
      return invalid_argument("'" + part + "' is not COUNT or COUNT(xNODES)");
    if (out.size() + std::stoul(times) > kMaxHosts) return invalid_argument("'" + spec + "' counts too many nodes");
    out.insert(out.end(), std::stoul(times), std::stoi(count));
  }
  return out;
}

StatusOr<std::optional<Placement>> placement(int islands, int ranks, const Getenv& getenv) {
  if (getenv("SLURM_PROCID") == nullptr) return std::optional<Placement>();
  // Islands of several ranks are consecutive tasks, placed on nodes in blocks. (srun inside a
  // batch job reports "cyclic" for a step of one task per node; one-rank islands do not mind.)
  const char* distribution = getenv("SLURM_DISTRIBUTION");
  const bool block = distribution == nullptr || std::string(distribution).rfind("block", 0) == 0;
  if (ranks > 1 && !block) {
    return bad_env(std::string("SLURM_DISTRIBUTION='") + distribution +
                   "': atoll places an island's ranks on consecutive tasks, which needs the block "
                   "distribution (srun -m block)");
  }
  auto procid = integer(getenv, "SLURM_PROCID");
  if (!procid.is_ok()) return procid.status();
  const char* ntasks_var = getenv("SLURM_NTASKS") != nullptr ? "SLURM_NTASKS" : "SLURM_NPROCS";
  auto ntasks = integer(getenv, ntasks_var);
  if (!ntasks.is_ok()) return ntasks.status();
  Placement p;
  if (getenv("SLURM_LOCALID") != nullptr) {
    auto local = integer(getenv, "SLURM_LOCALID");
    if (!local.is_ok()) return local.status();
    p.local_id = static_cast<int>(local.value());
  }
  if (getenv("SLURM_RESTART_COUNT") != nullptr) {
    auto restarts = integer(getenv, "SLURM_RESTART_COUNT");
    if (!restarts.is_ok()) return restarts.status();
    p.restarts = static_cast<int>(restarts.value());
  }
  const std::string shape = std::to_string(islands) + " island" + (islands == 1 ? "" : "s") + " of " +
                            std::to_string(ranks) + " rank" + (ranks == 1 ? "" : "s");
  int64_t rank0_task = 0;
  if (getenv("SLURM_ARRAY_TASK_ID") != nullptr) {  // one array element per island
    auto index = integer(getenv, "SLURM_ARRAY_TASK_ID");
    if (!index.is_ok()) return index.status();
    if (index.value() >= islands) {
      return invalid_argument("SLURM_ARRAY_TASK_ID=" + std::to_string(index.value()) + " but the run has " + shape +
                              ": array indices are island ids, 0 to " + std::to_string(islands - 1));
    }
    if (ntasks.value() != ranks) {
      return invalid_argument(std::string(ntasks_var) + "=" + std::to_string(ntasks.value()) + " in array element " +
                              std::to_string(index.value()) + " but the run has " + shape +
                              ": each element runs one island, one task per rank");
    }
    p.array = true;
    p.island = static_cast<int>(index.value());
    p.rank = static_cast<int>(procid.value());
  } else {
    if (ntasks.value() != static_cast<int64_t>(islands) * ranks) {
      return invalid_argument(std::string(ntasks_var) + "=" + std::to_string(ntasks.value()) + " but the run has " +
                              shape + ": one task per rank, " + std::to_string(int64_t{islands} * ranks) +
                              " tasks");
    }
    p.island = static_cast<int>(procid.value() / ranks);
    p.rank = static_cast<int>(procid.value() % ranks);
    rank0_task = int64_t{p.island} * ranks;
  }
  if (procid.value() >= ntasks.value()) {
    return bad_env("SLURM_PROCID=" + std::to_string(procid.value()) + " is not below " + ntasks_var + "=" +
                            std::to_string(ntasks.value()));
  }
  if (const char* own = getenv("SLURMD_NODENAME"); ranks == 1 && own != nullptr) {
    p.rank0_host = own;  // the island is this task
  } else if (block) {
    auto host = host_of_task(getenv, rank0_task);
    if (!host.is_ok()) return host.status();
    p.rank0_host = host.value();
  }
  return std::optional<Placement>(p);
}

std::string task_device(const std::string& device, const Placement& p, const Getenv& getenv) {
  if (device != "cuda") return device;
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0') return "cuda:0";
  return "cuda:" + std::to_string(p.local_id);
}

namespace {

// "tcp://node7:29500" -> "node7".
std::string endpoint_host(const std::string& endpoint) {
  std::string rest = endpoint.substr(endpoint.find("://") == std::string::npos ? 0 : endpoint.find("://") + 3);
  return rest.substr(0, rest.rfind(':'));
}

std::string header(const config::Config& c, const std::string& job, const std::string& cwd) {
  std::string h = "#!/bin/bash\n";
  h += "#SBATCH --job-name=" + job + "\n";
  h += "#SBATCH --chdir=" + cwd + "\n";
  if (!c.slurm.partition.empty()) h += "#SBATCH --partition=" + c.slurm.partition + "\n";
  if (!c.slurm.account.empty()) h += "#SBATCH --account=" + c.slurm.account + "\n";
  if (!c.slurm.time.empty()) h += "#SBATCH --time=" + c.slurm.time + "\n";
  h += "#SBATCH --requeue\n";
  return h;
}

std::string extra(const config::Config& c) {
  std::string e;
  for (const auto& line : c.slurm.sbatch) e += "#SBATCH " + line + "\n";
  return e;
}

// `srun BINARY ROLE CONFIG --set ... --quiet`, quoted for the shell.
// An island's task count is its ranks (islands.ranks, the same for every island under Slurm),
// placed in a block so that its ranks are consecutive tasks.
std::string srun_line(const config::Config& c, const ProcessOptions& o, const std::string& role) {
  const int tasks = role == "island" ? c.islands.ranks.values.front() : 1;
  std::string line = "srun --ntasks=" + std::to_string(tasks) + (tasks > 1 ? " --distribution=block " : " ") +
                     shell_quote(c.slurm.binary) + " " + role + " " + shell_quote(o.config_path);
  for (const auto& s : o.overrides) line += " --set " + shell_quote(s);
  return line + " --quiet\n";
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = dirs.find(':', start);
    const std::string d = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!d.empty() && ::access((d + "/" + program).c_str(), X_OK) == 0) return true;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return false;
}

// `sbatch --parsable ARGS FILE`: the job id, or the error it printed.
StatusOr<std::string> sbatch(const std::string& args, const std::string& file) {
  const std::string cmd = "sbatch --parsable " + args + " " + shell_quote(file) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return invalid_argument("cannot run sbatch");
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (status != 0) return invalid_argument("sbatch " + file + ": " + out);
  return out.substr(0, out.find(';'));  // "ID" or "ID;CLUSTER"
}

}  // namespace

namespace {

// The island array's indices: this site's islands (slurm.islands), or 0-(count - 1).
std::string array_spec(const config::Config& c) {
  std::string spec;
  if (c.slurm.islands.empty()) return spec.append("0-").append(std::to_string(c.islands.count - 1));
  std::vector<int> ids = c.slurm.islands;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int id : ids) {
    if (!spec.empty()) spec += ',';
    spec += std::to_string(id);
  }
  return spec;
}

}  // namespace

BatchScripts batch_scripts(const config::Config& c, const ProcessOptions& o, const std::string& cwd) {
  BatchScripts b;
  b.dir = (std::filesystem::path(c.run.out_dir) / (c.run.name + "-slurm")).string();
  const std::string name = "atoll-" + c.run.name;
  b.coordinator = header(c, name + "-coordinator", cwd);
  b.coordinator += "#SBATCH --ntasks=1\n";
  b.coordinator += "#SBATCH --output=" + b.dir + "/coordinator-%j.out\n";
  if (!loopback(c.transport.coordinator) && !endpoint_host(c.transport.coordinator).empty() &&
      endpoint_host(c.transport.coordinator) != "*")  // "*": wherever it runs (hosts.h)
    b.coordinator += "#SBATCH --nodelist=" + endpoint_host(c.transport.coordinator) + "\n";
  b.coordinator += extra(c);
  b.coordinator += "# The coordinator of run " + c.run.name + ". Requeued, it picks the run up where it was.\n";
  b.coordinator += "exec " + srun_line(c, o, "coordinator");

  b.islands = header(c, name + "-islands", cwd);
  b.islands += "#SBATCH --array=" + array_spec(c) + "\n";
  const int ranks = c.islands.ranks.values.front();
  b.islands += "#SBATCH --ntasks=" + std::to_string(ranks) + "\n";
  // An island's ranks bind transport.host, one address: they share a node. With "*" each
  // binds its own node's name and they may span nodes (docs/ranks.md).
  if (ranks > 1 && !island_host_discovered(c.transport)) b.islands += "#SBATCH --nodes=1\n";
  // Before the time limit every task gets SIGUSR1 and the run checkpoints (docs/checkpoints.md
  // "A checkpoint on a signal"); requeued or resubmitted with --resume it goes on from there.
  if (!c.slurm.time.empty() && c.checkpoint.every > 0 && c.slurm.signal_before_s > 0)
    b.islands += "#SBATCH --signal=USR1@" + std::to_string(c.slurm.signal_before_s) + "\n";
  b.islands += "#SBATCH --output=" + b.dir + "/island-%a-%j.out\n";
  b.islands += extra(c);
  b.islands += "# Island SLURM_ARRAY_TASK_ID of run " + c.run.name + " (atoll island takes its id from it" +
               (ranks > 1 ? ", each task its rank" : "") + ").\n";
  b.islands += "# Requeued or resubmitted alone (--array=K), it rejoins the running run.\n";
  b.islands += "exec " + srun_line(c, o, "island");
  return b;
}

int run_slurm_command(const config::Config& config, const ProcessOptions& options, bool submit, bool dry_run) {
  const auto& ranks = config.islands.ranks.values;
  if (std::adjacent_find(ranks.begin(), ranks.end(), std::not_equal_to<>()) != ranks.end())
    config::fail_key(config, "islands.ranks", "differs between islands; atoll slurm writes one island job array, whose "
                                              "elements have one task count (write one config per island size)");
  const BatchScripts b = batch_scripts(config, options, std::filesystem::current_path().string());
  if (submit && !on_path("sbatch")) {
    throw UserError("slurm --submit: sbatch is not on PATH (run it on a submit host of the cluster, or install "
                    "slurm-client)");
  }
  const bool with_coordinator = config.slurm.coordinator;
  if (!with_coordinator && loopback(config.transport.coordinator))
    config::fail_key(config, "transport.coordinator", "is a loopback address, but slurm.coordinator is false: the "
                                                      "coordinator runs at another site, whose address this must be");
  if (with_coordinator) std::printf("# %s/coordinator.sbatch\n%s\n", b.dir.c_str(), b.coordinator.c_str());
  std::printf("# %s/islands.sbatch\n%s", b.dir.c_str(), b.islands.c_str());
  if (with_coordinator && loopback(config.transport.coordinator)) {
    std::printf("\n# transport.coordinator is a loopback address: every job must run on one node. For islands on\n"
                "# other nodes, set it to an address of the coordinator's node (its job is then pinned there).\n");
  }
  if (dry_run) return 0;
  std::filesystem::create_directories(b.dir);
  const std::string coordinator = b.dir + "/coordinator.sbatch", islands = b.dir + "/islands.sbatch";
  std::ofstream(islands) << b.islands;
  if (!with_coordinator) {  // another site's coordinator: this site's islands alone
    if (!submit) {
      std::printf("\nwritten: %s (submit: sbatch %s once the coordinator runs)\n", islands.c_str(), islands.c_str());
      return 0;
    }
    auto i = sbatch("", islands);
    if (!i.is_ok()) {
      std::fprintf(stderr, "atoll: slurm: %s\n", i.status().message().c_str());
      return 1;
    }
    std::printf("\nsubmitted: islands job array %s (%s) of the run coordinated at %s\n", i.value().c_str(),
                array_spec(config).c_str(), config.transport.coordinator.c_str());
    return 0;
  }
  std::ofstream(coordinator) << b.coordinator;
  if (!submit) {
    std::printf("\nwritten: %s, %s (submit: sbatch %s, then sbatch --dependency=after:<its job id> %s)\n",
                coordinator.c_str(), islands.c_str(), coordinator.c_str(), islands.c_str());
    return 0;
  }
  auto c = sbatch("", coordinator);
  if (!c.is_ok()) {
    std::fprintf(stderr, "atoll: slurm: %s\n", c.status().message().c_str());
    return 1;
  }
  auto i = sbatch("--dependency=after:" + c.value(), islands);
  if (!i.is_ok()) {
    std::fprintf(stderr, "atoll: slurm: %s (the coordinator job %s was submitted: scancel %s)\n",
                 i.status().message().c_str(), c.value().c_str(), c.value().c_str());
    return 1;
  }
  std::printf("\nsubmitted: coordinator job %s, islands job array %s (%s)\n", c.value().c_str(), i.value().c_str(),
              array_spec(config).c_str());
  std::printf("follow: squeue -j %s,%s; tail -f %s/%s/metrics.jsonl\n", c.value().c_str(), i.value().c_str(),
              config.run.out_dir.c_str(), config.run.name.c_str());
  return 0;
}

std::string sweep_batch_script(const config::Config& base, const std::string& sweep_dir, size_t runs, int jobs,
                               const std::string& cwd) {
  const std::string dir = std::filesystem::absolute(sweep_dir).lexically_normal().string();
  std::string b = header(base, "atoll-sweep-" + std::filesystem::path(dir).filename().string(), cwd);
  b += "#SBATCH --array=0-" + std::to_string(runs - 1) + (jobs > 0 ? "%" + std::to_string(jobs) : "") + "\n";
  b += "#SBATCH --ntasks=1\n";
  if (base.run.threads > 0) b += "#SBATCH --cpus-per-task=" + std::to_string(base.run.threads) + "\n";
  b += "#SBATCH --output=" + dir + "/slurm/run-%a-%A.out\n";
  b += extra(base);
  b += "# Element K runs line K + 1 of runs.txt: atoll simulate of its config, as `atoll sweep` runs it\n";
  b += "# locally (same run directory, same log); `atoll sweep` or `atoll report` afterwards see the results.\n";
  b += "id=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" " + shell_quote(dir + "/slurm/runs.txt") + ")\n";
  b += "exec " + shell_quote(base.slurm.binary) + " simulate " + shell_quote(dir + "/configs/") +
       "\"$id.yaml\" --force --quiet > " + shell_quote(dir + "/logs/") + "\"$id.log\" 2>&1\n";
  return b;
}

int submit_sweep(const config::Config& base, const std::string& sweep_dir, const std::vector<std::string>& ids,
                 int jobs, bool dry_run, const std::function<void()>& prepare) {
  if (!dry_run && !on_path("sbatch"))
    throw UserError("sweep --slurm: sbatch is not on PATH (run it on a submit host of the cluster, or install "
                    "slurm-client)");
  if (ids.empty()) {
    std::printf("sweep --slurm: every run is finished; nothing to submit\n");
    return 0;
  }
  const std::string script = sweep_batch_script(base, sweep_dir, ids.size(), jobs, std::filesystem::current_path().string());
  std::printf("# %s/slurm/sweep.sbatch\n%s", sweep_dir.c_str(), script.c_str());
  if (dry_run) return 0;
  prepare();
  const std::string dir = sweep_dir + "/slurm";
  std::filesystem::create_directories(dir);
  std::string list;
  for (const auto& id : ids) list += id + "\n";
  std::ofstream(dir + "/runs.txt") << list;
  std::ofstream(dir + "/sweep.sbatch") << script;
  auto job = sbatch("", dir + "/sweep.sbatch");
  if (!job.is_ok()) {
    std::fprintf(stderr, "atoll: sweep --slurm: %s\n", job.status().message().c_str());
    return 1;
  }
  std::printf("\nsubmitted: sweep job array %s (%zu runs%s)\n", job.value().c_str(), ids.size(),
              jobs > 0 ? (", " + std::to_string(jobs) + " at a time").c_str() : "");
  std::printf("follow: squeue -j %s; when it has ended, `atoll sweep` of the same file again submits (or, without\n"
              "--slurm, runs) only what did not finish, and `atoll report %s` writes the tables and plots\n",
              job.value().c_str(), sweep_dir.c_str());
  return 0;
}

}  // namespace atl::run::slurm
