// The metrics.jsonl records an island writes, one builder per record type, the same in
// `atoll simulate` and real runs. docs/metrics.md is the schema (every field, its type and
// unit, and which ones differ between runs). A value a mode does not measure is null, so a
// record type has the same keys in both modes.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/core/evaluator.h"

namespace atl::core {

// When a record was written: wall seconds since the run (or process) started, and the
// virtual clock of the simulator (NaN in real runs).
struct RecordTime {
  double wall_s = 0;
  double sim_s = NAN;
};

// Where a round's time went, in the island's clock's seconds since its previous round
// record; NaN where the mode does not measure it (real runs measure sync_s only).
struct RoundTimes {
  double compute_s = NAN;  // inner steps
  double comm_s = NAN;     // moving bytes
  double idle_s = NAN;     // waiting for other islands, or idling by the algorithm's choice
  double sync_s = NAN;     // blocked in the exchange (comm + waiting for the others)
};

std::string train_record(int island, int64_t step, double loss, double lr, const RecordTime& t);
std::string round_record(int island, const algorithms::RoundInfo& r, const RoundTimes& times, const RecordTime& t);
// The server role's record of a fedavg round it closed (island -1; docs/metrics.md): `step`
// is the round's nominal step label (ServerEvalSchedule::label).
std::string server_round_record(const algorithms::ServerRound& r, int64_t step, const RecordTime& t);
// `island`: the island that evaluated (-1: the server role). `bytes_sent`: bytes sent so far
// (the simulator: all islands; real runs: the evaluating island, or 0 for the server).
std::string eval_record(int island, int64_t step, const EvalResult& r, bool classifier, uint64_t bytes_sent,
                        const RecordTime& t);
// A re-routing of several paths at `step` (docs/metrics.md "reshard"), written by the
// lowest island that took part.
struct Reshard {
  int island = 0;
  int64_t step = 0;
  int64_t router_sequences = 0;
  std::vector<int64_t> labels;            // router sequences whose best path is p
  std::vector<int64_t> path_train_sequences, path_val_sequences;
  int64_t moved = 0;                      // training sequences now on another path
  double balance_error = 0;
  int contributors = 0;                   // islands whose scores were gathered
};
std::string reshard_record(const Reshard& r, const RecordTime& t);
struct IslandEnd {
  int island = 0;
  int64_t steps = 0;
  uint64_t bytes_sent = 0, bytes_recv = 0, raw_sent = 0;
  std::string global_xxh64;  // "" when the global model lives in the server role
};
std::string island_end_record(const IslandEnd& e, const RecordTime& t);
struct Rejoin {
  int island = 0;
  int donor = 0;
  int64_t step = 0;        // the donor's step at the hand-over; the joiner goes on after it
  int64_t round = 0;       // outer rounds the donor had completed
  uint64_t first_seq = 0;  // the first collective the joiner takes part in
  uint64_t epoch = 0;      // membership epoch of the hand-over
};
std::string rejoin_record(const Rejoin& r, const RecordTime& t);
// One island's membership change, in both modes: the simulator's scheduled events (`killed`,
// `rejoined`, `added`) and the coordinator's view changes in real runs (`joined`, `rejoined`,
// `added`, `ready`, `left`, `failed`). docs/metrics.md lists the changes and reasons.
struct MembershipChange {
  int island = 0;
  std::string change;
  std::string reason;        // simulate: at_step, at_time_s, event; real runs: the detector's words or ""
  int64_t step = -1;         // the island's step at the change; -1: not known (real runs), null
  uint64_t epoch = 0;        // the membership epoch after the change
  std::vector<int> members;  // live island ids after the change, ascending
};
std::string membership_record(const MembershipChange& m, const RecordTime& t);

}  // namespace atl::core
