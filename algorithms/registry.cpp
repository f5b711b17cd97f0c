// The list of algorithms atoll knows, by the name used in `algorithm.name`.
#include <functional>
#include <string>

#include "algorithms/builtin.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Algorithm> (*make)(const AlgorithmOptions&, int);
};

constexpr Entry kAlgorithms[] = {
    {"ddp", make_ddp},
    {"diloco", make_diloco},
    {"fedavg", make_fedavg},
    {"streaming_diloco", make_streaming_diloco},
    {"async_local_sgd", make_async_local_sgd},
};

std::string joined_names() {
  std::string out;
  for (const auto& e : kAlgorithms) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

}  // namespace

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& e : kAlgorithms) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Algorithm> make_algorithm(const AlgorithmOptions& options, int island) {
  for (const auto& e : kAlgorithms) {
    if (options.name == e.name) return e.make(options, island);
  }
  throw UserError("unknown algorithm '" + options.name + "' (valid: " + joined_names() + ")");
}

std::unique_ptr<transport::OuterServer> make_server(
    const AlgorithmOptions& options, const at::Tensor& initial,
    std::function<void(int64_t, const at::Tensor&)> on_round) {
  if (options.name == "fedavg") return make_fedavg_server(options, initial, std::move(on_round));
  if (options.name == "async_local_sgd") {
    return make_async_local_sgd_server(options, initial, std::move(on_round));
  }
  return nullptr;
}

}  // namespace atl::algorithms
