// The factories of the algorithms atoll knows, by the name used in `algorithm.name`: what
// builds an algorithm for an island and its server role. What validation asks without
// building one is the algorithm's row of the catalog (algorithms/catalog.cpp).
#include <functional>
#include <string>

#include "algorithms/builtin.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace {

using ServerFactory = std::unique_ptr<transport::OuterServer> (*)(const AlgorithmOptions&, const at::Tensor&,
                                                                  std::function<void(const ServerRound&)>);

struct Factory {
  const char* name;
  std::unique_ptr<Algorithm> (*make)(const AlgorithmOptions&, int);
  ServerFactory make_server;  // null: no server role (AlgorithmTraits::server_role)
};

const Factory kFactories[] = {
    {"ddp", make_ddp, nullptr},
    {"diloco", make_diloco, nullptr},
    {"fedavg", make_fedavg, make_fedavg_server},
    {"streaming_diloco", make_streaming_diloco, nullptr},
    {"async_local_sgd", make_async_local_sgd, make_async_local_sgd_server},
    {"demo", make_demo, nullptr},
    {"dipaco", make_dipaco, nullptr},
    {"sparseloco", make_sparseloco, nullptr},
};

const Factory* find(const std::string& name) {
  for (const auto& f : kFactories)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace

CheckpointCut Algorithm::checkpoint_cut() const {
  const AlgorithmTraits* t = find_algorithm_traits(name());
  return t ? t->checkpoint_cut : CheckpointCut::kStep;
}

std::unique_ptr<Algorithm> make_algorithm(const AlgorithmOptions& options, int island) {
  if (const Factory* f = find(options.name)) return f->make(options, island);
  algorithm_traits(options.name);  // throws for an unknown name, listing the valid ones
  throw UserError("algorithm '" + options.name + "' has no factory in algorithms/registry.cpp");
}

std::unique_ptr<transport::OuterServer> make_server(const AlgorithmOptions& options, const at::Tensor& initial,
                                                    std::function<void(const ServerRound&)> on_round) {
  const Factory* f = find(options.name);
  return f && f->make_server ? f->make_server(options, initial, std::move(on_round)) : nullptr;
}

}  // namespace atl::algorithms
