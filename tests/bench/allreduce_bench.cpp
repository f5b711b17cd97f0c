// All-reduce of one fp32 buffer (default 64 MB) among W islands (default 4) on loopback, one
// process per island (or one thread per island with --mode threads), through each backend
// row below. Prints one JSON line per row:
//   {"bench":"allreduce","backend":"zmq-ring","islands":4,"bytes":67108864,
//    "mode":"processes","iters":5,"time_s_median":...,"time_s_min":...,"busbw_gbs":...}
// time = the slowest island's wall time for one all-reduce (issue to completion), median
// and best over the timed iterations; bus bandwidth = 2 (W - 1) / W * bytes / time (GB/s,
// 1e9), the figure NCCL and Gloo report.
//
// Rows are an explicit list (backends()); Gloo rows (gloo's own ring called directly, and
// atoll's Gloo group) go there, each a function that runs one island's iterations.
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "tests/transport/zmq_group_test_util.h"
#include "transport/static_control_plane.h"
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
};

// One island's timed iterations of a row; returns one wall time (s) per timed iteration.
using Runner = std::function<std::vector<double>(const Setup&)>;

struct Backend {
  std::string name;
  Runner run;
};

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
    torch::manual_seed(s.id);
    at::Tensor buffer = torch::randn({s.n});
    at::Tensor token = torch::zeros({1});
    std::vector<double> times;
    for (int it = 0; it < s.options->warmup + s.options->iters; ++it) {
      group.allreduce_mean(token, codec)->wait();  // a barrier: everyone starts together
      const auto t0 = Clock::now();
      atl::transport::CollectiveResult r = group.allreduce_mean(buffer, codec)->wait();
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!r.status.is_ok()) throw std::runtime_error("all-reduce failed: " + r.status.to_string());
      if (it >= s.options->warmup) times.push_back(dt);
    }
    return times;
  };
}

// The rows, in order.
std::vector<Backend> backends() {
  atl::compression::StageConfig int8;
  int8.id = atl::compression::StageId::kInt8;
  return {
      {"zmq-ring", zmq_runner(atl::compression::Pipeline())},  // lossless: the ring
      {"zmq-direct-int8", zmq_runner(atl::compression::Pipeline::make({int8}).value())},
      // Gloo rows go here.
  };
}

// Runs `run` on every island (processes or threads); returns times[island][iteration].
std::vector<std::vector<double>> run_row(const Options& o, const Runner& run, int64_t n) {
  std::vector<Setup> setups(o.islands);
  const std::vector<atl::transport::Peer> peers = atl::transport::testing::loopback_peers(o.islands);
  for (int i = 0; i < o.islands; ++i) setups[i] = Setup{i, o.islands, n, &o, peers};
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
  app.add_option("--chunk-bytes", o.chunk_bytes, "ZmqGroupOptions::chunk_bytes")->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  app.add_option("--in-flight", o.in_flight, "ZmqGroupOptions::max_in_flight")->check(CLI::PositiveNumber);
  app.add_option("--mode", o.mode, "processes | threads")->check(CLI::IsMember({"processes", "threads"}));
  app.add_option("--only", o.only, "backend rows to run (default: all)");
  CLI11_PARSE(app, argc, argv);

  const int64_t n = static_cast<int64_t>(o.mb * (1 << 20) / 4);
  const double bytes = static_cast<double>(n) * 4;
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
    std::printf(
        "{\"bench\":\"allreduce\",\"backend\":\"%s\",\"islands\":%d,\"bytes\":%.0f,\"mode\":\"%s\","
        "\"chunk_bytes\":%lld,\"in_flight\":%d,\"iters\":%d,\"time_s_median\":%.4f,\"time_s_min\":%.4f,"
        "\"busbw_gbs\":%.3f}\n",
        b.name.c_str(), o.islands, bytes, o.mode.c_str(), static_cast<long long>(o.chunk_bytes), o.in_flight,
        o.iters, median, slowest.front(), busbw);
    std::fflush(stdout);
  }
  return 0;
}
