// Factories of the built-in algorithms, listed by algorithms/registry.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "algorithms/algorithm.h"

namespace atl::algorithms {

std::unique_ptr<Algorithm> make_ddp(const AlgorithmOptions& options, int island);
std::unique_ptr<Algorithm> make_diloco(const AlgorithmOptions& options, int island);
std::unique_ptr<Algorithm> make_fedavg(const AlgorithmOptions& options, int island);
std::unique_ptr<Algorithm> make_streaming_diloco(const AlgorithmOptions& options, int island);
std::unique_ptr<Algorithm> make_async_local_sgd(const AlgorithmOptions& options, int island);
std::unique_ptr<Algorithm> make_demo(const AlgorithmOptions& options, int island);
// DiLoCo per module of a modular model's paths (options.module_islands).
std::unique_ptr<Algorithm> make_dipaco(const AlgorithmOptions& options, int island);
std::unique_ptr<Algorithm> make_sparseloco(const AlgorithmOptions& options, int island);
std::unique_ptr<transport::OuterServer> make_fedavg_server(
    const AlgorithmOptions& options, const at::Tensor& initial,
    std::function<void(const ServerRound&)> on_round);
std::unique_ptr<transport::OuterServer> make_async_local_sgd_server(
    const AlgorithmOptions& options, const at::Tensor& initial,
    std::function<void(const ServerRound&)> on_round);

}  // namespace atl::algorithms
