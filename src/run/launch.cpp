// `atoll launch CONFIG`: the coordinator and every island of CONFIG as child processes of
// this one, on this machine. Children's output is merged line by line with a prefix
// ("[coordinator] ", "[island 2] "). SIGINT/SIGTERM are forwarded to every child; children
// die with us (PR_SET_PDEATHSIG), so nothing is left behind even if launch is killed.
// A coordinator killed by a signal while islands run is started again (at most 5 times).
// The coordinator reads launch's reports of island processes that exited on its stdin
// (--supervised; docs/protocol.md "Supervisor reports"): an island that dies before it
// joins is not waited for until transport.join_timeout_s.
// Exit code: 0 when every child exited 0; kExitSurvivors (3) when the run finished without
// some islands (the coordinator ended well and at least one island finished, but another
// died, was refused or could not join); 130 after Ctrl-C; else 1. Every launch ends with one
// closing line: finished, finished with survivors, interrupted or failed, and why.
// With --emulate-wan every island's connections (to each peer and to the coordinator) pass
// through a relay link (src/run/wan.h) that runs on a thread of launch itself, so relays
// stop with the run; their counters go to <run dir>/relays.jsonl.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/log.h"
#include "src/base/process.h"
#include "src/base/status.h"
#include "src/core/json.h"
#include "src/core/run_dir.h"
#include "src/run/start_gate.h"
#include "src/run/hosts.h"
#include "src/run/processes.h"
#include "src/run/wan.h"
#include "src/core/validate.h"
#include "transport/kinds.h"

namespace atl::run {
namespace {

struct Child {
  std::string prefix;
  int island = -1;       // -1: the coordinator
  int rank = 0;          // within its island (islands.ranks)
  pid_t pid = -1;
  int fd = -1;           // read end of the child's stdout+stderr
  int report_fd = -1;    // the coordinator: write end of its stdin (supervisor reports)
  std::string pending;   // a partial line
  int status = 0;
  bool exited = false;
};

std::atomic<int> g_signal{0};
void remember_signal(int sig) { g_signal = sig; }

// Runs `args` with this executable, or with `program` (looked up in PATH, e.g. ssh) when given.
// `reports`: the child's stdin is a pipe whose write end is Child::report_fd. With `warm` (and
// no program) while this process has one thread, the child runs warm(args) in the fork
// instead of executing this executable: it starts with libtorch loaded, shows `args` as its
// command line (ps, /proc), and has what exec would give it (run_forked, src/base/process.h).
Child spawn(const std::string& prefix, const std::vector<std::string>& args, const std::string& program = "",
            bool reports = false, const ProcessOptions* options = nullptr) {
  const bool warm = program.empty() && options != nullptr && options->warm && single_threaded();
  std::fflush(nullptr);  // what this process has buffered is written once, not by both
  int fds[2], in[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {fds[0], fds[1], in[0], in[1]})
      if (fd >= 0) close(fd);
  };
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (reports && pipe2(in, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    in[0] = in[1] = -1;
    close_all();
    throw std::runtime_error("pipe: " + why);
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    close_all();
    throw std::runtime_error("fork: " + why);
  }
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);  // launch ignores it; its children do not
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // launch died between fork and prctl
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (reports) dup2(in[0], STDIN_FILENO);
    if (warm) run_forked(options->warm, args);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (program.empty()) {
      execv("/proc/self/exe", argv.data());
    } else {
      execvp(program.c_str(), argv.data());
    }
    std::fprintf(stderr, "exec failed: %s\n", std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  Child c;
  c.prefix = prefix;
  c.pid = pid;
  c.fd = fds[0];
  if (reports) {
    close(in[0]);
    c.report_fd = in[1];
    // A coordinator that stops reading never blocks launch (a report is a few bytes).
    fcntl(c.report_fd, F_SETFL, fcntl(c.report_fd, F_GETFL) | O_NONBLOCK);
  }
  return c;
}

// Tells the coordinator that an island's process exited (a coordinator that is gone is
// told again when it is restarted).
void report_exit(const Child& coordinator, const ExitReport& r) {
  if (coordinator.report_fd < 0) return;
  const std::string line = encode_exit_report(r) + "\n";
  (void)!write(coordinator.report_fd, line.data(), line.size());  // a short pipe message; EPIPE is ignored
}

void drain(Child& c, bool flush) {
  char buf[4096];
  for (;;) {
    const ssize_t n = read(c.fd, buf, sizeof buf);
    if (n <= 0) break;
    c.pending.append(buf, static_cast<size_t>(n));
    if (n < static_cast<ssize_t>(sizeof buf)) break;
  }
  size_t start = 0, nl;
  while ((nl = c.pending.find('\n', start)) != std::string::npos) {
    std::fprintf(stderr, "%s%s\n", c.prefix.c_str(), c.pending.substr(start, nl - start).c_str());
    start = nl + 1;
  }
  c.pending.erase(0, start);
  // progress lines use '\r'; print what is there when the child is gone
  if (flush && !c.pending.empty()) {
    std::fprintf(stderr, "%s%s\n", c.prefix.c_str(), c.pending.c_str());
    c.pending.clear();
  }
}

// The relays of --emulate-wan, forwarding on their own thread from construction to stop().
class Relays {
 public:
  Relays(const config::Config& config, const WanOptions& options) : plan_(plan_wan(config, options)) {
    auto r = transport::relay::Relay::create(plan_.relay);
    if (!r.is_ok()) throw UserError("launch --emulate-wan: " + r.status().message());
    relay_ = std::move(r).value();
    thread_ = std::thread([this] { relay_->run(); });
  }
  ~Relays() { stop(); }

  // Island i's flags: the coordinator and every peer through the relay of its link.
  std::vector<std::string> island_args(int i) const {
    const auto at = [&](size_t link) { return "tcp://" + relay_->address(link); };
    std::vector<std::string> a = {"--set", "transport.coordinator=" + at(plan_.control_link[static_cast<size_t>(i)])};
    for (const auto& [peer, link] : plan_.peer_link[static_cast<size_t>(i)]) {
      a.push_back("--peer-endpoint");
      a.push_back(std::to_string(peer) + "=" + at(link));
    }
    return a;
  }

  // Rank r >= 1 of island i (islands.shard_exchange): every peer's rank r through the relay
  // of its link; its shard plane binds the port the relays forward to (shard_plane_port).
  std::vector<std::string> rank_args(int i, int r) const {
    std::vector<std::string> a;
    const auto& links = plan_.shard_link[static_cast<size_t>(i)];
    if (r < 1 || static_cast<size_t>(r - 1) >= links.size()) return a;
    for (const auto& [peer, link] : links[static_cast<size_t>(r - 1)]) {
      a.push_back("--peer-endpoint");
      a.push_back(std::to_string(peer) + "=tcp://" + relay_->address(link));
    }
    return a;
  }

  // Stops forwarding; writes the counters to `path` (one JSON object per link) and logs a total.
  void finish(const std::string& path) {
    stop();
    const auto stats = relay_->stats();
    std::ofstream out(path);
    uint64_t bytes = 0, stalls = 0, reset = 0;
    for (const auto& s : stats) {
      if (out) out << link_stats_json(s) << "\n";
      bytes += s.forward.bytes + s.backward.bytes;
      stalls += s.forward.loss_stalls + s.backward.loss_stalls + s.periodic_stalls;
      reset += s.reset;
    }
    ATOLL_INFO("launch: " << stats.size() << " relay links carried " << bytes << " bytes, " << stalls
                          << " stalls, " << reset << " connections reset by cuts" << (out ? " (" + path + ")" : ""));
  }

 private:
  void stop() {
    if (!thread_.joinable()) return;
    relay_->stop();
    thread_.join();
  }

  WanPlan plan_;
  std::unique_ptr<transport::relay::Relay> relay_;
  std::thread thread_;
};

bool exited_ok(const Child& c) { return WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0; }

std::string how_it_ended(const Child& c) {
  return WIFEXITED(c.status) ? "exit code " + std::to_string(WEXITSTATUS(c.status))
                             : "signal " + std::to_string(WTERMSIG(c.status));
}

// The run's summary.json when this launch's coordinator wrote it (not older than `since`).
std::string fresh_summary(const config::Config& config, std::filesystem::file_time_type since) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(config.run.out_dir) / config.run.name / "summary.json";
  std::error_code ec;
  const auto written = fs::last_write_time(path, ec);
  if (ec || written < since - std::chrono::seconds(1)) return "";
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The exit code of a finished launch from its children ([0] the coordinator, then the
// `islands` islands' processes: each island's rank 0, then the other ranks), said in one closing line: 0 when all exited 0; kExitSurvivors, naming the islands
// lost, when the coordinator and at least one island exited 0 (the coordinator exits 0 only
// when an island finished the run); 1 otherwise, with the coordinator's reason from
// summary.json (`summary`, "" when it wrote none).
int run_outcome(const std::vector<Child>& children, size_t islands, const std::string& summary) {
  core::RunOutcome counts;  // what the summary says was not written
  if (auto asked = core::json_find_number(summary, "checkpoints_asked")) {
    counts.checkpoints = true;
    counts.checkpoints_asked = static_cast<int64_t>(*asked);
    counts.checkpoints_written = static_cast<int64_t>(core::json_find_number(summary, "checkpoints_written").value_or(0));
  }
  counts.records_lost = static_cast<uint64_t>(core::json_find_number(summary, "records_lost").value_or(0));
  counts.records_failure = core::json_find_string(summary, "records_failure").value_or("");
  const std::string note = core::outcome_note(counts);
  bool all_ok = true;
  for (const auto& c : children) all_ok = all_ok && exited_ok(c);
  if (all_ok) {
    ATOLL_INFO("launch: the run finished with all " << islands << " islands" << note << " (exit code 0)");
    return 0;
  }
  size_t finished = 0;
  std::string lost;
  for (size_t i = 1; i < children.size(); ++i) {
    if (exited_ok(children[i])) {
      finished += children[i].rank == 0 ? 1 : 0;  // an island is its rank 0
      continue;
    }
    std::string name = children[i].prefix;  // "[island 2] "
    name.erase(std::remove_if(name.begin(), name.end(), [](char ch) { return ch == '[' || ch == ']'; }), name.end());
    while (!name.empty() && name.back() == ' ') name.pop_back();
    lost += (lost.empty() ? "" : ", ") + name + " (" + how_it_ended(children[i]) + ")";
  }
  if (!exited_ok(children.front()) || finished == 0) {
    std::string why = core::json_find_string(summary, "error").value_or("");
    if (why.empty() && !exited_ok(children.front()))
      why = "the coordinator exited with " + how_it_ended(children.front()) + " (its lines above say why)";
    if (why.empty()) why = "no island finished the run";
    ATOLL_ERROR("launch: the run failed: " << why << (lost.empty() ? "" : "; lost: " + lost) << note << " (exit code 1)");
    return 1;
  }
  ATOLL_WARN("launch: the run finished with " << finished << " of " << islands << " islands; lost: " << lost << note
                                              << " (exit code " << kExitSurvivors << ")");
  return kExitSurvivors;
}

// What --emulate-wan cannot route, each one line (nothing started).
void check_emulate_wan(const config::Config& config) {
  if (const auto* kind = transport::find_transport_kind(config.transport.kind); kind && kind->no_relays) {
    throw UserError(config.source + ": key 'transport.kind': launch --emulate-wan is not available with " +
                    config.transport.kind + " (" + kind->no_relays + ")");
  }
  if (!config.islands.shard_exchange) return;
  // The relays forward to each rank's shard plane at a port of its own (shard_plane_port):
  // base_port + K .. base_port + R x K - 1, clear of the ranks' c10d stores.
  const auto& t = config.transport;
  const int k = config.islands.count, first = t.base_port + k, last = t.base_port + config.islands.ranks.max() * k - 1;
  const int stores = t.rank_port > 0 ? t.rank_port : t.base_port + 400;
  if (last > 65535 || (stores <= last && stores + k - 1 >= first))
    throw UserError(config.source + ": key 'transport.rank_port': launch --emulate-wan puts the ranks' shard planes on "
                    "ports " + std::to_string(first) + ".." + std::to_string(last) + " (transport.base_port + rank x "
                    "islands.count + island), which the islands' rank stores (" + std::to_string(stores) + "..) overlap "
                    "or which exceed 65535; move transport.rank_port or transport.base_port");
}

}  // namespace

int launch(const config::Config& config, const ProcessOptions& options) {
  core::validate_config(config, core::Target::kLaunch);
  std::vector<std::string> common = {options.config_path};
  for (const auto& o : options.overrides) {
    common.push_back("--set");
    common.push_back(o);
  }
  common.push_back("--quiet");
  std::vector<Child> children;
  auto args = [&](const std::string& cmd, std::vector<std::string> extra) {
    std::vector<std::string> a = {"atoll", cmd};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  if (options.emulate_wan) check_emulate_wan(config);
  // What to start: [0] is the coordinator. With `hosts:`, processes on other machines are
  // started through ssh (or only printed, without --ssh).
  struct Start {
    std::string prefix;
    std::vector<std::string> argv;
    std::string program;  // "" = this executable
    int island = -1;      // -1: the coordinator
    int rank = 0;
  };
  std::vector<Start> starts;
  std::unique_ptr<Relays> relays;
  bool supervised = false;  // the coordinator is told of island processes that exit
  if (uses_hosts(config)) {
    if (options.emulate_wan)
      throw UserError("launch: --emulate-wan runs every process on this machine; it cannot be combined with hosts:");
    if (config.islands.ranks.max() > 1)
      throw UserError("launch: with a hosts: section it starts one process per island; islands of several ranks "
                      "(islands.ranks) are started by Slurm (atoll slurm) or one process per rank with atoll island "
                      "--id K --rank R (docs/ranks.md)");
    const auto commands = host_commands(config, options);
    if (!options.ssh) {
      std::printf("# run these, coordinator first (or: atoll launch --ssh %s)\n", options.config_path.c_str());
      for (const auto& c : commands) {
        std::string line = c.host.empty() ? config.hosts.binary : "ssh " + c.host + " " + shell_quote(c.remote);
        if (c.host.empty()) for (const auto& a : c.atoll) line.append(" ").append(shell_quote(a));
        std::printf("%s  # %s\n", line.c_str(), c.role.c_str());
      }
      return 0;
    }
    supervised = true;  // the coordinator's command has --supervised (host_commands)
    for (const auto& c : commands) {
      std::vector<std::string> argv = {"atoll"};
      argv.insert(argv.end(), c.atoll.begin(), c.atoll.end());
      const int island = static_cast<int>(starts.size()) - 1;  // the coordinator's command comes first
      starts.push_back(c.host.empty() ? Start{"[" + c.role + "] ", argv, "", island}
                                      : Start{"[" + c.role + "@" + c.host + "] ", ssh_argv(c), "ssh", island});
    }
  } else {
    if (options.emulate_wan) relays = std::make_unique<Relays>(config, options.wan);
    // The first start never picks up an earlier run's state; a restart (below) does. It reads
    // launch's reports of island processes that exit.
    starts.push_back({"[coordinator] ",
                      args("coordinator", options.force ? std::vector<std::string>{"--force", "--no-pickup", "--supervised"}
                                                        : std::vector<std::string>{"--no-pickup", "--supervised"}),
                      ""});
    supervised = true;
    for (int i = 0; i < config.islands.count; ++i) {
      std::vector<std::string> extra = {"--id", std::to_string(i)};
      if (relays) for (auto& a : relays->island_args(i)) extra.push_back(a);
      starts.push_back({"[island " + std::to_string(i) + "] ", args("island", extra), "", i});
    }
    // An island's other ranks (islands.ranks; docs/ranks.md): they talk only to its rank 0.
    for (int i = 0; i < config.islands.count; ++i) {
      for (int r = 1; r < config.islands.ranks.of(i); ++r) {
        std::vector<std::string> extra = {"--id", std::to_string(i), "--rank", std::to_string(r)};
        if (relays) for (auto& a : relays->rank_args(i, r)) extra.push_back(a);
        starts.push_back({"[island " + std::to_string(i) + " rank " + std::to_string(r) + "] ", args("island", extra), "",
                          i, r});
      }
    }
  }
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Writing to a coordinator that has died must not kill launch.
  signal(SIGPIPE, SIG_IGN);
  const auto started_at = std::filesystem::file_time_type::clock::now();
  for (size_t s = 0; s < starts.size(); ++s) {
    children.push_back(spawn(starts[s].prefix, starts[s].argv, starts[s].program, s == 0 && supervised, &options));
    children.back().island = starts[s].island;
    children.back().rank = starts[s].rank;
    if (s == 0) usleep(200 * 1000);  // let the coordinator bind before the islands dial (they retry anyway)
  }
  ATOLL_INFO("launch: coordinator + " << config.islands.count << " islands started (pids "
                                      << children.front().pid << "..." << children.back().pid << ")");

  int forwarded = 0;
  size_t alive = children.size();
  std::vector<ExitReport> reported;  // told to the coordinator (again after a restart)
  constexpr int kMaxCoordinatorRestarts = 5;
  int coordinator_restarts = 0;
  // Stragglers of a finished run, timed in seconds, not polls (an exited child's pipe stays
  // readable, and LEAVEs may still be on a slow emulated link):
  //  - every island exited but the coordinator still runs (e.g. all failed before joining):
  //    it would wait for them forever; stop it so that it writes its summary;
  //  - the coordinator exited (every island left or was declared dead) but islands still run:
  //    they were cut off from the run (a partition, a lost link) and would wait forever.
  using SteadyClock = std::chrono::steady_clock;
  std::optional<SteadyClock::time_point> stragglers_since;
  const auto grace = std::chrono::seconds(5) + std::chrono::milliseconds(config.transport.heartbeat_timeout_ms);
  bool stopped_stragglers = false;
  while (alive > 0) {
    const bool coordinator_alone = alive == 1 && !children.front().exited;
    const bool islands_orphaned = children.front().exited && alive > 0;
    // A coordinator that exited with an error code ended the run as failed: nothing the
    // islands still compute counts, so they are stopped at once.
    const bool coordinator_failed = islands_orphaned && WIFEXITED(children.front().status) &&
                                    WEXITSTATUS(children.front().status) != 0;
    if ((coordinator_alone || islands_orphaned) && !stopped_stragglers) {
      if (!stragglers_since) stragglers_since = SteadyClock::now();
      const auto wait = coordinator_alone ? std::chrono::seconds(5) : coordinator_failed ? SteadyClock::duration::zero() : grace;
      if (SteadyClock::now() - *stragglers_since >= wait) {
        if (coordinator_failed) {
          ATOLL_WARN("launch: the coordinator failed the run; stopping " << alive << " island(s)");
        } else if (islands_orphaned) {
          ATOLL_WARN("launch: the coordinator has ended; stopping " << alive << " island(s) cut off from the run");
        }
        for (auto& c : children) if (!c.exited) kill(c.pid, SIGTERM);
        stopped_stragglers = true;
      }
    }
    if (g_signal != 0 && forwarded != g_signal) {
      forwarded = g_signal;
      for (auto& c : children) if (!c.exited) kill(c.pid, forwarded);
    }
    std::vector<pollfd> pfds;
    for (auto& c : children) pfds.push_back({c.exited ? -1 : c.fd, POLLIN, 0});
    poll(pfds.data(), pfds.size(), 200);
    for (size_t i = 0; i < children.size(); ++i) {
      if (pfds[i].revents & (POLLIN | POLLHUP)) drain(children[i], false);
    }
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        drain(c, true);
        // A coordinator killed mid-run is started again; it picks the run up from its saved
        // running state (docs/checkpoints.md "Coordinator restart") while the islands go on.
        if (&c == &children.front() && WIFSIGNALED(status) && g_signal == 0 && alive > 1 && !uses_hosts(config) &&
            coordinator_restarts < kMaxCoordinatorRestarts) {
          ++coordinator_restarts;
          ATOLL_WARN("launch: the coordinator died (signal " << WTERMSIG(status) << "); restarting it ("
                                                            << coordinator_restarts << " of " << kMaxCoordinatorRestarts << ")");
          close(c.fd);
          if (c.report_fd >= 0) close(c.report_fd);
          std::vector<std::string> argv;
          for (const auto& a : starts.front().argv)
            if (a != "--force" && a != "--no-pickup") argv.push_back(a);
          argv.push_back("--set");  // pick the run up, whatever --resume started it
          argv.push_back("run.resume=false");
          c = spawn(starts.front().prefix, argv, starts.front().program, supervised, &options);
          c.island = -1;
          for (const ExitReport& r : reported) report_exit(c, r);
          continue;
        }
        c.exited = true;
        c.status = status;
        --alive;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          ATOLL_WARN("launch: " << c.prefix << "exited with "
                                << (WIFEXITED(status) ? "code " + std::to_string(WEXITSTATUS(status))
                                                      : "signal " + std::to_string(WTERMSIG(status))));
          // An island: the coordinator hears of it at once (one that had not joined yet is
          // then not waited for).
          // An island's other ranks end with its rank 0, whose exit is the island's.
          if (supervised && &c != &children.front() && c.rank == 0) {
            reported.push_back({c.island, how_it_ended(c)});
            report_exit(children.front(), reported.back());
          }
        }
      }
    }
  }
  if (relays) relays->finish(config.run.out_dir + "/" + config.run.name + "/relays.jsonl");
  for (auto& c : children) {
    close(c.fd);
    if (c.report_fd >= 0) close(c.report_fd);
  }
  if (g_signal != 0) {
    ATOLL_WARN("launch: the run was interrupted (signal " << g_signal << "); stopped every process (exit code 130)");
    return 130;
  }
  // The run directory is the coordinator's: here unless hosts.coordinator puts it elsewhere.
  return run_outcome(children, static_cast<size_t>(config.islands.count), config.hosts.coordinator.empty() ? fresh_summary(config, started_at) : "");
}

}  // namespace atl::run
