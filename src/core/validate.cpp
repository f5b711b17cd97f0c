// validate_config: the checks of validate.h, each reported at the place the key was set.
// The rules themselves live with their components (algorithms::check_options,
// models::check_model, compression::Pipeline::make); this file asks each of them, plus
// what only the whole config or the machine can say (events, transports, device, memory).
#include "src/core/validate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/catalog.h"
#include "algorithms/options.h"
#include "src/core/config_options.h"
#include "src/core/progress.h"
#include "src/data/kinds.h"
#include "src/data/partition_rules.h"
#include "src/models/model.h"
#include "transport/kinds.h"

namespace atl::core {
namespace {

bool real_run(Target t) {
  return t == Target::kLaunch || t == Target::kIsland || t == Target::kCoordinator;
}

// A component's problem at the place its key was set; a key left at its default points at
// its section's name key (model.name, algorithm.name) or any key of its section the text set.
void fail(const config::Config& c, const KeyProblem& p) {
  std::string where = p.key;
  if (!c.origins.count(where)) {
    const std::string section = p.key.substr(0, p.key.find('.'));
    if (c.origins.count(section + ".name")) {
      where = section + ".name";
    } else {
      for (const auto& [key, place] : c.origins)
        if (key.rfind(section + ".", 0) == 0) {
          where = key;
          break;
        }
    }
  }
  config::fail_key(c, p.key, p.message, where);
}

// "cpu", "cuda" or "cuda:N" (N a device index); nullopt for anything else. `index` is -1
// without one.
std::optional<bool> parse_device(const std::string& d, int& index) {
  index = -1;
  const size_t colon = d.find(':');
  const std::string type = d.substr(0, colon);
  if (type != "cpu" && type != "cuda") return std::nullopt;
  if (colon != std::string::npos) {
    const std::string n = d.substr(colon + 1);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    index = std::stoi(n);
  }
  return type == "cuda";
}

void check_device(const config::Config& c, CudaProbe cuda) {
  const std::string& d = c.run.device;
  int index = -1;
  const std::optional<bool> is_cuda = parse_device(d, index);
  if (!is_cuda)
    config::fail_key(c, "run.device", "'" + d + "' is not a device atoll can use (cpu, cuda or cuda:N)");
  if (!*is_cuda) return;
  if (cuda == nullptr)
    config::fail_key(c, "run.device", "'" + d + "' is checked only by a program that loads libtorch");
  const CudaDevices here = cuda();
  if (!here.built)
    config::fail_key(c, "run.device", "'" + d + "' needs CUDA, but this atoll's libtorch was built without "
                                      "CUDA (use cpu)");
  const int n = here.count;
  if (n == 0) config::fail_key(c, "run.device", "'" + d + "': no CUDA device is visible on this machine (use cpu)");
  if (index >= n)
    config::fail_key(c, "run.device", "'" + d + "': this machine has " + std::to_string(n) + " CUDA device" +
                                      (n == 1 ? "" : "s") + " (cuda:0 .. cuda:" + std::to_string(n - 1) + ")");
}

// What the config says about the data's shape without reading it; false when only the
// files know (tokens: the largest id; idx: the images' size and the labels).
bool static_shape(const config::DataConfig& d, models::DataShape& shape) {
  const data::DataKind* kind = data::find_data_kind(d.kind);
  if (kind && kind->fixed_vocab > 0) {
    shape.vocab = kind->fixed_vocab;  // text: byte-level (src/data/text_reader.cpp)
    return true;
  }
  if (kind && kind->generated) {
    shape.classes = d.synthetic_classes;
    shape.input_dim = d.synthetic_dim;
    return true;
  }
  return false;
}

void check_events(const config::Config& c, Target target) {
  for (size_t i = 0; i < c.islands.events.size(); ++i) {
    const auto& e = c.islands.events[i];
    const std::string key = "islands.events[" + std::to_string(i) + "]";
    if (e.kill < 0 && e.rejoin < 0 && e.add <= 0) continue;  // a partition
    // e.g. fedavg drops a killed client from its rounds (docs/algorithms.md §7); a client
    // that joins would need a place in the server's plan of rounds, which it does not have.
    if (const char* why = algorithms::algorithm_traits(c.algorithm.name).refuses_joiners; why && (e.rejoin >= 0 || e.add > 0))
      config::fail_key(c, key, "rejoin and add events are not available with " + c.algorithm.name + " (" + why + ")",
                       "islands.events");
    if (real_run(target))
      config::fail_key(c, key, "kill, rejoin and add events are applied by atoll simulate only; a real run "
                               "would ignore them (remove the event, and stop or start island processes "
                               "yourself)", "islands.events");
  }
}

void check_transport(const config::Config& c) {
  const auto& t = c.transport;
  const transport::TransportKind* kind = transport::find_transport_kind(t.kind);
  if (!kind) {
    std::string names;
    for (const auto& k : transport::kTransportKinds) names += (names.empty() ? "" : ", ") + std::string(k.name);
    config::fail_key(c, "transport.kind", "'" + t.kind + "' is not available for real runs (use " + names + ")");
  }
  const std::string with = "not available with transport.kind " + t.kind + " (";
  if (t.curve && kind->no_curve) config::fail_key(c, "transport.curve", with + kind->no_curve + ")");
  if (t.collective == "star" && kind->no_star)
    config::fail_key(c, "transport.collective", "'star' (all-reduce through the coordinator) is " + with + kind->no_star + ")");
}

// checkpoint: and run.resume (docs/checkpoints.md): what this version saves and restores.
void check_checkpoint(const config::Config& c, Target target) {
  const auto& k = c.checkpoint;
  if (real_run(target)) {
    // Real runs (docs/checkpoints.md "Real runs"): every island process checkpoints at the
    // same step once the exchange in flight there (if any) has completed, fedavg's clients at
    // server rounds. async_local_sgd's cut is in virtual time, which real runs do not have.
    if (k.every > 0 && algorithms::algorithm_traits(c.algorithm.name).checkpoint_cut ==
                           algorithms::CheckpointCut::kServerTime)
      config::fail_key(c, "checkpoint.every", "real runs (launch, island, coordinator) checkpoint every algorithm "
                                              "but async_local_sgd, not " + c.algorithm.name + " (set it to 0)");
    if (c.run.resume && k.every == 0)
      config::fail_key(c, "run.resume", "there is nothing to resume from: checkpoints are off (set checkpoint.every)");
    return;
  }
  if (c.run.resume && k.every == 0)
    config::fail_key(c, "run.resume", "there is nothing to resume from: checkpoints are off (set checkpoint.every)");
  if (k.every == 0) return;
  if (const char* limit = algorithms::algorithm_traits(c.algorithm.name).checkpoint_limit)
    config::fail_key(c, "checkpoint.every", "algorithm '" + c.algorithm.name + "' cannot be checkpointed: " +
                                                limit + " (set it to 0)");
}

// islands.shard_exchange (docs/ranks.md "The outer exchange, sharded"): what this version
// shards. Each refusal says what is not built yet, so that nothing runs half-sharded.
void check_shard_exchange(const config::Config& c) {
  if (c.network.rank_links && !c.islands.shard_exchange)
    config::fail_key(c, "network.rank_links",
                     "gives each rank of an island a link of its own, which only a sharded exchange uses: set "
                     "islands.shard_exchange (and islands.ranks > 1)");
  if (!c.islands.shard_exchange) return;
  const auto& r = c.islands.ranks.values;
  const std::string key = "islands.shard_exchange";
  auto refuse = [&](const std::string& why) { config::fail_key(c, key, why); };
  if (c.islands.ranks.max() < 2) refuse("shards the outer exchange over an island's ranks: set islands.ranks > 1");
  if (c.islands.ranks.max() > 255) refuse("shards over at most 255 ranks an island");
  if (std::adjacent_find(r.begin(), r.end(), std::not_equal_to<>()) != r.end())
    refuse("needs the same islands.ranks for every island (rank r of every island carries shard r)");
  if (algorithms::algorithm_traits(c.algorithm.name).server_role)
    refuse(c.algorithm.name + " talks to its server from rank 0 alone; there is no exchange to shard");
  if (c.transport.collective == "star") refuse("not available with transport.collective star (one all-reduce through the coordinator)");
}

void check_memory(const config::Config& c, Target target) {
  if (c.run.device != "cpu") return;  // parameters live on the device (not estimated yet)
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return;
  const double physical = static_cast<double>(pages) * static_cast<double>(page);
  const MemoryEstimate m = estimate_memory(c, target);
  if (m.bytes <= physical) return;
  std::string key = "model.name";
  for (const char* k : {"model.layers", "model.dim", "model.vocab", "model.hidden"})
    if (c.origins.count(k)) {
      key = k;
      break;
    }
  char params[32];
  std::snprintf(params, sizeof params, "%.3g", static_cast<double>(m.params));
  config::fail_key(c, key, "the model does not fit in memory: at least " + human_bytes(m.bytes) + " (" + params +
                               " parameters x 4 bytes x " + std::to_string(m.copies) + " copies (" +
                               m.copies_text + ") x " + std::to_string(m.islands) +
                               (target == Target::kLaunch ? (m.islands == 1 ? " island process" : " island processes")
                                                                  : (m.islands == 1 ? " island" : " islands")) +
                               (m.shared > 0 ? " + a gradient buffer they share" : "") +
                               (target == Target::kLaunch ? " on this machine" : " in one process") + ") but this machine has " +
                               human_bytes(physical));
}

}  // namespace

MemoryEstimate estimate_memory(const config::Config& c, Target target) {
  MemoryEstimate m;
  models::DataShape shape;
  static_shape(c.data, shape);
  m.params = models::estimate_numel(c.model, shape);
  m.copies_text = "parameters";
  m.copies = 1;
  if (target == Target::kCoordinator) {
    m.islands = 1;  // the global model it evaluates (and the server role's)
  } else {
    const algorithms::AlgorithmTraits& traits = algorithms::algorithm_traits(c.algorithm.name);
    if (target == Target::kSimulate && traits.step_local_gradient) {
      m.shared = 1;  // the islands share one gradient buffer (docs/simulator.md "Memory")
    } else {
      m.copies_text += ", gradients";
      m.copies += 1;
    }
    int inner = 0;
    if (c.train.optimizer == "adamw") inner = 2;
    else if (c.train.momentum > 0) inner = 1;
    if (inner > 0) {
      m.copies_text += ", " + c.train.optimizer + " state x" + std::to_string(inner);
      m.copies += inner;
    }
    if (traits.extra_buffers > 0) {
      m.copies_text += std::string(", ") + traits.extra_buffers_text;
      m.copies += traits.extra_buffers;
    }
    m.islands = c.islands.count;
    if (target == Target::kIsland) m.islands = 1;
    if (target == Target::kLaunch) {
      // Every rank of an island placed on this machine is a process holding the whole model
      // (docs/ranks.md).
      m.islands = 0;
      for (int i = 0; i < c.islands.count; ++i) {
        const bool here = c.hosts.islands.empty() ||
                          (static_cast<size_t>(i) < c.hosts.islands.size() && c.hosts.islands[static_cast<size_t>(i)].empty());
        if (here) m.islands += c.islands.ranks.of(i);
      }
    }
  }
  m.bytes = static_cast<double>(m.params) * 4.0 * (static_cast<double>(m.copies) * m.islands + m.shared);
  return m;
}

void check_config(const config::Config& c, Target target, CudaProbe cuda) {
  config::check_environment(c);
  if (auto p = algorithms::name_problem(c.algorithm.name)) fail(c, *p);
  models::DataShape shape;
  const bool shape_known = static_shape(c.data, shape);
  if (auto p = models::check_model(c.model, shape, shape_known); p && p->key == "model.name") fail(c, *p);
  if (auto p = algorithms::codec_problem(c.algorithm.name, stage_configs(c))) config::fail_key(c, "compression", *p);
  if (target == Target::kRelay) {
    check_events(c, target);
    return;
  }
  // launch with hosts: the processes on other machines check their own device at start.
  bool remote = !c.hosts.coordinator.empty();
  for (const auto& h : c.hosts.islands) remote = remote || !h.empty();
  if (!(target == Target::kLaunch && remote)) check_device(c, cuda);
  if (auto p = models::check_model(c.model, shape, shape_known)) fail(c, *p);
  if (auto p = data::check_partition(c.data)) fail(c, *p);
  if (auto p = algorithms::check_options(algorithm_options(c, {}))) fail(c, *p);
  check_eval_keys(c);  // data.loss_after, the paths' keys (src/core/island_parts.h)
  check_events(c, target);
  check_checkpoint(c, target);
  check_shard_exchange(c);
  if (real_run(target)) check_transport(c);
  check_memory(c, target);
}

}  // namespace atl::core
