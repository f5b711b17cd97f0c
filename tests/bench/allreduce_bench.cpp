// All-reduce of one fp32 buffer (default 64 MB) among W islands (default 4) on loopback, one
// process per island (or one thread per island with --mode threads), through each backend
// row below. Prints one JSON line per row:
//   {"bench":"allreduce","backend":"zmq-ring","islands":4,"bytes":67108864,
//    "mode":"processes","iters":5,"time_s_median":...,"time_s_min":...,"busbw_gbs":...}
// time = the slowest island's wall time for one all-reduce (issue to completion), median
// and best over the timed iterations; bus bandwidth = 2 (W - 1) / W * bytes / time (GB/s,
// 1e9), the figure NCCL and Gloo report; "vs_gloo" = time / the gloo-ring row's time.
//
// Rows are an explicit list (backends()), each a function that runs one island's
// iterations:
//   gloo-ring        gloo::allreduce (gloo's own ring, Algorithm::RING) called directly on a
//                    gloo context connected through gloo's FileStore: the reference;
//   zmq-ring         atoll's ZmqGroup, lossless ring (StaticControlPlane peers);
//   zmq-direct-int8  atoll's ZmqGroup, int8: the lossy reduce-scatter/all-gather;
//   gloo-group       atoll's GlooGroup (ring over gloo pairs), rendezvous through a real
//                    coordinator process's store.
// gloo-ring sums; atoll's groups compute the mean (and keep a copy of input and result for
// restarts), so they do slightly more work per all-reduce.
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
#include "transport/static_control_plane.h"
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

// One island's timed iterations of a row; returns one wall time (s) per timed iteration.
using Runner = std::function<std::vector<double>(const Setup&)>;

struct Backend {
  std::string name;
  Runner run;
};

// The timed loop shared by atoll's groups: a one-element all-reduce as a barrier (everyone
// starts together), then the timed all-reduce.
std::vector<double> time_group(atl::transport::Group& group, const Setup& s, const atl::compression::Pipeline& codec) {
  torch::manual_seed(s.id);
  at::Tensor buffer = torch::randn({s.n});
  at::Tensor token = torch::zeros({1});
  std::vector<double> times;
  for (int it = 0; it < s.options->warmup + s.options->iters; ++it) {
    group.allreduce_mean(token, codec)->wait();
    const auto t0 = Clock::now();
    atl::transport::CollectiveResult r = group.allreduce_mean(buffer, codec)->wait();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r.status.is_ok()) throw std::runtime_error("all-reduce failed: " + r.status.to_string());
    if (it >= s.options->warmup) times.push_back(dt);
  }
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

// atoll's GlooGroup, joined to the row's coordinator like an island of a real run.
Runner gloo_group_runner(atl::compression::Pipeline codec) {
  return [codec](const Setup& s) {
    atl::transport::ControlClientOptions cc;
    cc.coordinator = s.coordinator;
    cc.island = s.id;
    auto client = atl::transport::ZmqControlClient::connect(cc, Clock::now() + std::chrono::seconds(30));
    if (!client.is_ok()) throw std::runtime_error("cannot join the coordinator: " + client.status().to_string());
    atl::transport::Membership m = client.value()->membership();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (static_cast<int>(m.members.size()) < s.islands && Clock::now() < deadline) {
      m = client.value()->wait_for_change(m.epoch, deadline);
    }
    atl::transport::GlooGroupOptions go;
    go.chunk_bytes = s.options->chunk_bytes;
    atl::transport::GlooGroup group(*client.value(), go);
    return time_group(group, s, codec);
  };
}

// gloo's own ring all-reduce (sum), called directly.
std::vector<double> gloo_ring(const Setup& s) {
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
  std::vector<double> times;
  for (int it = 0; it < s.options->warmup + s.options->iters; ++it) {
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
    if (it >= s.options->warmup) times.push_back(dt);
  }
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

// Runs `run` on every island (processes or threads); returns times[island][iteration].
std::vector<std::vector<double>> run_row(const Options& o, const Runner& run, int64_t n) {
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
  std::vector<std::vector<double>> times(o.islands);
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
        std::vector<double> t = run(setups[i]);
        if (::write(fds[1], t.data(), t.size() * sizeof(double)) < 0) code = 1;
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
    times[i].resize(o.iters);
    const ssize_t want = static_cast<ssize_t>(o.iters * sizeof(double));
    ssize_t got = 0;
    while (got < want) {
      const ssize_t r = ::read(pipes[i], reinterpret_cast<char*>(times[i].data()) + got, want - got);
      if (r <= 0) break;
      got += r;
    }
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
  std::optional<double> gloo_median;  // the reference row's time
  for (const Backend& b : backends()) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), b.name) == o.only.end()) continue;
    std::vector<std::vector<double>> times = run_row(o, b.run, n);
    std::vector<double> slowest(o.iters, 0.0);  // per iteration: the last island to finish
    for (const auto& t : times) {
      for (int k = 0; k < o.iters; ++k) slowest[k] = std::max(slowest[k], t[k]);
    }
    std::sort(slowest.begin(), slowest.end());
    const double median = slowest[slowest.size() / 2];
    const double busbw = 2.0 * (o.islands - 1) / o.islands * bytes / median / 1e9;
    if (b.name == "gloo-ring") gloo_median = median;
    char ratio[64] = "";
    if (gloo_median) std::snprintf(ratio, sizeof ratio, ",\"vs_gloo\":%.2f", median / *gloo_median);
    std::printf(
        "{\"bench\":\"allreduce\",\"backend\":\"%s\",\"islands\":%d,\"bytes\":%.0f,\"mode\":\"%s\","
        "\"chunk_bytes\":%lld,\"in_flight\":%d,\"iters\":%d,\"time_s_median\":%.4f,\"time_s_min\":%.4f,"
        "\"busbw_gbs\":%.3f%s}\n",
        b.name.c_str(), o.islands, bytes, o.mode.c_str(), static_cast<long long>(o.chunk_bytes), o.in_flight,
        o.iters, median, slowest.front(), busbw, ratio);
    std::fflush(stdout);
  }
  return 0;
}
