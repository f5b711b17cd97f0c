#include "src/run/slurm.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

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
  if (const char* d = getenv("SLURM_DISTRIBUTION"); d != nullptr && std::string(d).rfind("block", 0) != 0) {
    return bad_env(std::string("SLURM_DISTRIBUTION='") + d +
                            "': atoll places an island's ranks on consecutive tasks, which needs the block "
                            "distribution (srun's default; -m block)");
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
  auto host = host_of_task(getenv, rank0_task);
  if (!host.is_ok()) return host.status();
  p.rank0_host = host.value();
  return std::optional<Placement>(p);
}

std::string task_device(const std::string& device, const Placement& p, const Getenv& getenv) {
  if (device != "cuda") return device;
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0') return "cuda:0";
  return "cuda:" + std::to_string(p.local_id);
}

}  // namespace atl::run::slurm
