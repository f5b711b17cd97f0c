// All-reduce of one fp32 buffer (default 64 MB) among W islands (default 4) on loopback, one
// process per island (or one thread per island with --mode threads), through each backend
// row below. Prints one JSON line per row:
//   {"bench":"allreduce","backend":"zmq-ring","islands":4,"bytes":67108864,
//    "mode":"processes","iters":5,"time_s_median":...,"time_s_min":...,"busbw_gbs":...,
//    "cpu_s":...}
// time = the slowest island's wall time for one all-reduce (issue to completion), median
// and best over the timed iterations; bus bandwidth = 2 (W - 1) / W * bytes / time (GB/s,
// 1e9), the figure NCCL and Gloo report; "vs_gloo" = time / the gloo-ring row's time.
// cpu_s = CPU seconds (user + system, every thread) the island processes spent per timed
// all-reduce, summed over the islands (a row's coordinator process is not included; with
// --mode threads, the one process's); "cpu_vs_gloo" its ratio to the gloo-ring row's. On a
// shared machine CPU time moves much less with the load than wall time does.
//
// Rows are an explicit list (backends()), each a function that runs one island's
// iterations:
//   gloo-ring        gloo::allreduce (gloo's own ring, Algorithm::RING) called directly on a
//                    gloo context connected through gloo's FileStore: the reference;
//   zmq-ring         atoll's ZmqGroup, lossless ring (StaticControlPlane peers);
//   zmq-direct-int8  atoll's ZmqGroup, int8: the lossy reduce-scatter/all-gather;
//   zmq-star         atoll's ZmqGroup with options.star (transport.collective: star): every
//                    island's buffer to a real coordinator process, which reduces and sends
//                    the mean back;
//   gloo-group       atoll's GlooGroup (ring over gloo pairs), rendezvous through a real
//                    coordinator process's store.
// gloo-ring sums; atoll's groups compute the mean (and keep a copy of input and result for
// restarts), so they do slightly more work per all-reduce.
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "src/base/log.h"
#include "tests/transport/zmq_group_test_util.h"
#include "transport/gloo/gloo_group.h"
#include "tests/transport/static_control_plane.h"
#include "transport/zmq/control_client.h"
#include "transport/zmq/coordinator.h"
#include "transport/zmq/zmq_group.h"

namespace {

using atl::transport::Clock;

struct Options {
  int islands = 4;
  double mb = 64;                  // buffer size, MiB of fp32
  int warmup = 1;                  // untimed all-reduces first
  int iters = 5;                   // timed all-reduces
  int64_t chunk_bytes = 1 << 20;   // ZmqGroupOptions::chunk_bytes
  int in_flight = 8;               // ZmqGroupOptions::max_in_flight
  std::string mode = "processes";  // processes | threads
  std::vector<std::string> only;   // backend names to run (empty = all)
};

// What one island needs to run its part of a row.
struct Setup {
  int id = 0, islands = 0;
  int64_t n = 0;                   // elements
  const Options* options = nullptr;
  std::vector<atl::transport::Peer> peers;  // loopback data endpoints, one per island
  std::string coordinator;         // endpoint of this row's coordinator process
  std::string store_dir;           // an empty directory for gloo's FileStore
};

// What one island measured over a row's timed iterations.
struct IslandTimes {
  std::vector<double> wall_s;  // per timed all-reduce
  double cpu_s = 0;            // its process's CPU time over all of them (every thread)
};
using Runner = std::function<IslandTimes(const Setup&)>;

double process_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Backend {
  std::string name;
  Runner run;
};

// The timed loop shared by atoll's groups: a one-element all-reduce as a barrier (everyone
// starts together), then the timed all-reduce.
IslandTimes time_group(atl::transport::Group& group, const Setup& s, const atl::compression::Pipeline& codec) {
  torch::manual_seed(s.id);
  at::Tensor buffer = torch::randn({s.n});
  at::Tensor token = torch::zeros({1});
  IslandTimes times;
  for (int it = 0; it < s.options->warmup + s.options->iters; ++it) {
    if (it == s.options->warmup) times.cpu_s = -process_cpu_s();
    group.allreduce_mean(token, codec)->wait();
    const auto t0 = Clock::now();
    atl::transport::CollectiveResult r = group.allreduce_mean(buffer, codec)->wait();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r.status.is_ok()) throw std::runtime_error("all-reduce failed: " + r.status.to_string());
    if (it >= s.options->warmup) times.wall_s.push_back(dt);
  }
  times.cpu_s += process_cpu_s();
  return times;
}

Runner zmq_runner(atl::compression::Pipeline codec) {
  return [codec](const Setup& s) {
    atl::transport::StaticClusterOptions so;
    so.peers = s.peers;
    atl::transport::StaticCluster cluster(so);
    std::unique_ptr<atl::transport::ControlPlane> plane = cluster.plane(s.id);
    atl::transport::ZmqGroupOptions zo;
    zo.chunk_bytes = s.options->chunk_bytes;
    zo.max_in_flight = s.options->in_flight;
    atl::transport::ZmqGroup group(*plane, zo);
    return time_group(group, s, codec);
  };
}

// Joins the row's coordinator like an island of a real run (publishing its data endpoint, so
// that it takes part in collectives) and waits until every island has.
std::unique_ptr<atl::transport::ZmqControlClient> join_coordinator(const Setup& s) {
  atl::transport::ControlClientOptions cc;
  cc.coordinator = s.coordinator;
  cc.island = s.id;
  cc.data_endpoint = s.peers[s.id].endpoint;
  auto client = atl::transport::ZmqControlClient::connect(cc, Clock::now() + std::chrono::seconds(30));
  if (!client.is_ok()) throw std::runtime_error("cannot join the coordinator: " + client.status().to_string());
  atl::transport::Membership m = client.value()->membership();
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (static_cast<int>(m.members.size()) < s.islands && Clock::now() < deadline) {
    m = client.value()->wait_for_change(m.epoch, deadline);
  }
  return std::move(client.value());
}

// atoll's GlooGroup, joined to the row's coordinator.
Runner gloo_group_runner(atl::compression::Pipeline codec) {
  return [codec](const Setup& s) {
    auto client = join_coordinator(s);
    atl::transport::GlooGroupOptions go;
    go.chunk_bytes = s.options->chunk_bytes;
    atl::transport::GlooGroup group(*client, go);
    return time_group(group, s, codec);
  };
}

// atoll's ZmqGroup with the star all-reduce through the row's coordinator (fp32 pipeline).
IslandTimes zmq_star(const Setup& s) {
  auto client = join_coordinator(s);
  atl::transport::ZmqGroupOptions zo;
  zo.chunk_bytes = s.options->chunk_bytes;
  zo.max_in_flight = s.options->in_flight;
  zo.star = true;
  atl::transport::ZmqGroup group(*client, zo);
  return time_group(group, s, atl::compression::Pipeline());
}

// gloo's own ring all-reduce (sum), called directly.
IslandTimes gloo_ring(const Setup& s) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(s.store_dir);
  gloo::rendezvous::PrefixStore prefixed("ring", store);
  auto context = std::make_shared<gloo::rendezvous::Context>(s.id, s.islands);
  context->setTimeout(std::chrono::seconds(60));
  context->connectFullMesh(prefixed, device);
  torch::manual_seed(s.id);
  at::Tensor buffer = torch::randn({s.n});
  IslandTimes times;
  for (int it = 0; it < s.options->warmup + s.options->iters; ++it) {
    if (it == s.options->warmup) times.cpu_s = -process_cpu_s();
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
    const auto t0 = Clock::now();
    gloo::AllreduceOptions o(context);
    o.setOutput(buffer.data_ptr<float>(), static_cast<size_t>(s.n));
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
    o.setReduceFunction(sum);
    gloo::allreduce(o);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (it >= s.options->warmup) times.wall_s.push_back(dt);
  }
  times.cpu_s += process_cpu_s();
  return times;
}

// The rows, in order.
std::vector<Backend> backends() {
  atl::compression::StageConfig int8;
  int8.id = atl::compression::StageId::kInt8;
  return {
      {"gloo-ring", gloo_ring},  // the reference: first, so that the others report their ratio
      {"zmq-ring", zmq_runner(atl::compression::Pipeline())},  // lossless: the ring
      {"zmq-direct-int8", zmq_runner(atl::compression::Pipeline::make({int8}).value())},
      {"zmq-star", zmq_star},
      {"gloo-group", gloo_group_runner(atl::compression::Pipeline())},
  };
}

// A coordinator in its own process (started before any island, ended with the row).
class CoordinatorProcess {
 public:
  CoordinatorProcess(int islands, const std::string& endpoint) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      atl::transport::CoordinatorOptions co;
      co.endpoint = endpoint;
      co.expected_islands = islands;
      auto c = atl::transport::Coordinator::start(co);
      if (!c.is_ok()) {
        std::fprintf(stderr, "coordinator: %s\n", c.status().to_string().c_str());
        ::_exit(1);
      }
      for (;;) ::pause();  // until SIGTERM
    }
  }
  ~CoordinatorProcess() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
};

// Runs `run` on every island (processes or threads); returns what each island measured.
std::vector<IslandTimes> run_row(const Options& o, const Runner& run, int64_t n) {
  std::vector<Setup> setups(o.islands);
  const std::vector<atl::transport::Peer> peers = atl::transport::testing::loopback_peers(o.islands);
  const std::string coordinator =
      "tcp://127.0.0.1:" + std::to_string(atl::transport::testing::free_ports(1)[0]);
  std::string store_dir = (std::filesystem::temp_directory_path() / "atoll-bench-XXXXXX").string();
  if (::mkdtemp(store_dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  for (int i = 0; i < o.islands; ++i) setups[i] = Setup{i, o.islands, n, &o, peers, coordinator, store_dir};
  CoordinatorProcess coordinator_process(o.islands, coordinator);
  struct RemoveDir {
    std::string path;
    ~RemoveDir() { std::filesystem::remove_all(path); }
  } remove_store{store_dir};
  std::vector<IslandTimes> times(o.islands);
  if (o.mode == "threads") {
    std::vector<std::thread> threads;
    for (int i = 0; i < o.islands; ++i) threads.emplace_back([&, i] { times[i] = run(setups[i]); });
    for (auto& t : threads) t.join();
    return times;
  }
  std::vector<int> pipes(o.islands);
  std::vector<pid_t> pids(o.islands);
  for (int i = 0; i < o.islands; ++i) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pids[i] = ::fork();
    if (pids[i] == 0) {  // the island's process
      ::close(fds[0]);
      at::set_num_threads(1);
      int code = 0;
      try {
        IslandTimes t = run(setups[i]);
        t.wall_s.push_back(t.cpu_s);  // sent after the wall times
        if (::write(fds[1], t.wall_s.data(), t.wall_s.size() * sizeof(double)) < 0) code = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "island %d: %s\n", i, e.what());
        code = 1;
      }
      ::_exit(code);
    }
    ::close(fds[1]);
    pipes[i] = fds[0];
  }
  for (int i = 0; i < o.islands; ++i) {
    std::vector<double> values(o.iters + 1);  // the wall times, then the CPU time
    const ssize_t want = static_cast<ssize_t>(values.size() * sizeof(double));
    ssize_t got = 0;
    while (got < want) {
      const ssize_t r = ::read(pipes[i], reinterpret_cast<char*>(values.data()) + got, want - got);
      if (r <= 0) break;
      got += r;
    }
    times[i].cpu_s = values.back();
    values.pop_back();
    times[i].wall_s = std::move(values);
    ::close(pipes[i]);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    if (got != want || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error("island " + std::to_string(i) + "'s process failed");
    }
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"All-reduce bandwidth among islands on loopback"};
  app.add_option("--islands", o.islands, "islands (processes or threads)")->check(CLI::Range(1, 64));
  app.add_option("--mb", o.mb, "buffer size in MiB of fp32")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed all-reduces")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", o.iters, "timed all-reduces")->check(CLI::PositiveNumber);
  app.add_option("--chunk-bytes", o.chunk_bytes, "ZmqGroupOptions / GlooGroupOptions::chunk_bytes")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  app.add_option("--in-flight", o.in_flight, "ZmqGroupOptions::max_in_flight")->check(CLI::PositiveNumber);
  app.add_option("--mode", o.mode, "processes | threads")->check(CLI::IsMember({"processes", "threads"}));
  app.add_option("--only", o.only, "backend rows to run (default: all)");
  CLI11_PARSE(app, argc, argv);

  atl::set_log_level(atl::LogLevel::kError);  // the coordinators' and clients' notices
  const int64_t n = static_cast<int64_t>(o.mb * (1 << 20) / 4);
  const double bytes = static_cast<double>(n) * 4;
  std::optional<double> gloo_median, gloo_cpu;  // the reference row's
  for (const Backend& b : backends()) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), b.name) == o.only.end()) continue;
    std::vector<IslandTimes> times;
    try {
      times = run_row(o, b.run, n);  // a failed row has ended its processes (its coordinator too)
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", b.name.c_str(), e.what());
      return 1;
    }
    std::vector<double> slowest(o.iters, 0.0);  // per iteration: the last island to finish
    double cpu = 0;  // per all-reduce: the islands' processes together
    for (const auto& t : times) {
      for (int k = 0; k < o.iters; ++k) slowest[k] = std::max(slowest[k], t.wall_s[k]);
      cpu = o.mode == "threads" ? std::max(cpu, t.cpu_s) : cpu + t.cpu_s;  // threads: one process
    }
    cpu /= o.iters;
    std::sort(slowest.begin(), slowest.end());
    const double median = slowest[slowest.size() / 2];
    const double busbw = 2.0 * (o.islands - 1) / o.islands * bytes / median / 1e9;
    if (b.name == "gloo-ring") {
      gloo_median = median;
      gloo_cpu = cpu;
    }
    char ratio[96] = "";
    if (gloo_median) {
      std::snprintf(ratio, sizeof ratio, ",\"vs_gloo\":%.2f,\"cpu_vs_gloo\":%.2f", median / *gloo_median,
                    cpu / *gloo_cpu);
    }
    std::printf(
        "{\"bench\":\"allreduce\",\"backend\":\"%s\",\"islands\":%d,\"bytes\":%.0f,\"mode\":\"%s\","
        "\"chunk_bytes\":%lld,\"in_flight\":%d,\"iters\":%d,\"time_s_median\":%.4f,\"time_s_min\":%.4f,"
        "\"busbw_gbs\":%.3f,\"cpu_s\":%.4f%s}\n",
        b.name.c_str(), o.islands, bytes, o.mode.c_str(), static_cast<long long>(o.chunk_bytes), o.in_flight,
        o.iters, median, slowest.front(), busbw, cpu, ratio);
    std::fflush(stdout);
  }
  return 0;
}
