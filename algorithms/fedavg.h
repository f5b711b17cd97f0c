// Federated Averaging (McMahan et al., arXiv 1602.05629 v4, with its erratum).
//
// Server, round t = 0..R-1: S_t = m = max(floor(C*K), 1) clients sampled without
//   replacement (seeded by (seed, t)); each selected client k pulls w_t, runs u_k local
//   steps (u_k = local_steps, or E * ceil(n_k / B)), pushes delta_k = w_t - w_k;
//   Delta = sum_{k in S_t} n_k delta_k / sum_{k in S_t} n_k   (weights normalised over the
//   selected clients only); w_{t+1} = OuterOpt(w_t, Delta). With outer SGD lr 1 and no
//   momentum this is exactly w_{t+1} = sum (n_k / m_t) w_k (the paper); other outer
//   optimizers give FedOpt.
// State: server w [N] + outer optimizer state; client: the pulled w_t [N] for its delta.
// Bytes per round: each selected client pulls N*b and pushes N*b; nothing for the others.
// Faults (docs/algorithms.md §7, Flower's accept_failures / min-clients): a selected client
//   the membership loses before it delivers, or whose result is not in by the round's
//   deadline (round_timeout_s after the round opened), is dropped from the round; the round
//   closes with the rest, weights renormalised over those that delivered. Fewer than
//   min_clients results: the round is skipped (model unchanged, the round counter advances).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "algorithms/options.h"

namespace atl::algorithms::fedavg {

// Clients per round: max(floor(C*K), 1).
int clients_per_round(double fraction, int clients);
// The m clients of round t, ascending; deterministic in (seed, round).
std::vector<int> select_clients(uint64_t seed, int64_t round, int clients, int m);
// Local steps of a client with n examples per participation.
int64_t local_steps(const AlgorithmOptions& options, int64_t shard_size);
// The option rules of fedavg: min_clients at most the clients per round.
std::optional<OptionProblem> check(const AlgorithmOptions& options);

}  // namespace atl::algorithms::fedavg
