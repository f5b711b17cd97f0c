// Every check of a config that can be made before a run starts, in one place. `atoll
// validate`, `simulate`, `launch`, `island`, `coordinator`, `relay` and the sweep planner all
// call validate_config right after parsing, before anything is built, written or started;
// components keep their own checks as invariants, but a config that passes here does not
// fail them (docs/errors.md: "Config errors").
#pragma once

#include <cstdint>
#include <string>

#include "src/config/config.h"

namespace atl::core {

// What is about to run the config: the checks that depend on it differ.
enum class Target : uint8_t {
  kSimulate,     // atoll simulate, atoll validate, sweeps: every island in this process
  kLaunch,       // atoll launch: the coordinator and the islands, as processes of this machine
                 // (or of the hosts: section)
  kIsland,       // atoll island --id K: one island in this process
  kCoordinator,  // atoll coordinator: membership, evaluation and the server role
  kRelay,        // atoll relay --config: only the network: section and partitions are used
};

// Checks, in this order, and throws atl::UserError "FILE:LINE: key 'KEY': problem" (the
// place where the key was set) for the first that fails:
// 1. files the config names exist (config::check_environment);
// 2. algorithm.name and model.name are registered (the message lists the valid names);
// 3. the compression pipeline builds (stage order and parameters);
// 4. run.device parses and exists here (cuda needs a libtorch built with CUDA and a device;
//    not for kLaunch with a hosts: section, whose processes check their own machines);
// 5. the model's size rules, with what the config says about the data (text: 256 tokens;
//    synthetic: its dim and classes; tokens and idx files are not read here), and the
//    partition's (dirichlet and shards need labelled data);
// 6. the algorithm's rules (algorithms::check_options: fragments vs blocks and H, overlap
//    steps, dn_c, fedavg rounds);
// 7. islands.events: kill, rejoin and add need an algorithm without a server round barrier
//    (not fedavg); real runs (kLaunch, kIsland, kCoordinator) refuse them, since only the
//    simulator applies them (partitions are kept: launch --emulate-wan applies those);
// 7b. checkpoint: real runs write none yet; run.resume needs checkpoint.every; the algorithm
//    must save its whole state (AlgorithmTraits::checkpoint_limit) and events are not saved yet;
// 8. real runs: transport settings that only one transport supports;
// 9. memory (cpu): parameters, gradients and optimizer state of the islands this process
//    holds (estimate_memory) must fit in the machine's physical memory.
// kRelay runs 1-3 and 7's fedavg rule only. Pure apart from reading the file system, the
// device list and the machine's memory size.
// In the engine (libtorch loaded); run.device cuda is checked against libtorch's CUDA
// (src/core/cuda_devices.cpp).
void validate_config(const config::Config& config, Target target);

// What validation needs to know of CUDA here: whether libtorch was built with it, and the
// devices it sees.
struct CudaDevices {
  bool built = false;
  int count = 0;
};
using CudaProbe = CudaDevices (*)();
// validate_config without libtorch (the `atoll` front end): the same checks, with `cuda`
// asked for a cuda run.device; nullptr: a cuda device is refused as not checkable here (the
// front end hands such configs to the engine first).
void check_config(const config::Config& config, Target target, CudaProbe cuda);

// A lower bound of the memory the parameters of a run take in one process of `target`.
struct MemoryEstimate {
  int64_t params = 0;      // parameters of one model
  int copies = 0;          // [N] float32 buffers per island: params, grads, optimizer state
  int islands = 0;         // islands (models) held by the process
  int shared = 0;          // [N] buffers the islands of the process share (the simulator's
                           // gradient with AlgorithmTraits::step_local_gradient)
  double bytes = 0;        // params * 4 * (copies * islands + shared)
  std::string copies_text; // what the copies are: "parameters, gradients, adamw state x2, ..."
};
MemoryEstimate estimate_memory(const config::Config& config, Target target);

}  // namespace atl::core
