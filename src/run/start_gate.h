// When a real run starts, and with which islands (docs/protocol.md "Starting a run").
//
// The coordinator decides, the islands follow: every island joins the control plane first
// (without its data endpoint), then waits for the decision under kRunStartKey in the
// rendezvous store. The run starts with the islands that have joined
//   - as soon as all islands.count have, or
//   - once transport.min_islands have and the others are not coming: join_timeout_s has
//     passed since the coordinator started, or every island still missing was refused by
//     the CURVE allow-list (a refused island exits at once; started again with its key
//     allowed, it comes in as a rejoiner) or is gone: its supervisor (atoll launch) saw its
//     process exit before it joined (docs/protocol.md "Supervisor reports");
// and fails, naming the missing islands and why, when that many cannot have joined by then.
// A failure that refused or gone islands make certain before the timeout is announced once
// the islands still expected have joined, or a heartbeat timeout after it became certain
// (the coordinator's part: still_expected()), so that its line names only islands that are
// refused, gone or truly absent, not islands that were still starting.
// An island in the start set publishes its data endpoint and trains from step 0; an island
// that joins after the decision (not in the set) waits for a live island's state as a
// rejoiner does (src/run/handover.h), where the transport and algorithm allow it.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/config/config.h"

namespace atl::run {

// Store key of the coordinator's decision; its value is encode_start()'s.
inline constexpr char kRunStartKey[] = "atoll/run/start";

struct StartDecision {
  bool start = false;
  std::vector<int> islands;  // start: the islands that start, ascending
  std::string why;           // a one-line account: who is missing and why (both outcomes)
};

// What the coordinator knows when it decides.
struct JoinView {
  int islands = 0;                  // islands.count
  int min_islands = 0;              // transport.min_islands resolved (1..islands)
  double join_timeout_s = 0;        // for messages
  bool timed_out = false;           // join_timeout_s has passed
  std::vector<int> joined;          // live members now
  std::set<int> left;               // joined earlier, gone now (left or declared dead)
  std::map<int, std::string> refused;  // id -> why its connection was refused
  std::map<int, std::string> gone;     // id -> how its process ended (its supervisor's report)
};

// The decision, or nullopt to keep waiting. Pure.
std::optional<StartDecision> decide_start(const JoinView& view);
// The islands missing from `view` that may still join: neither refused nor gone. Ascending.
std::vector<int> still_expected(const JoinView& view);

// A supervisor's report on the coordinator's stdin (atoll coordinator --supervised): island
// `island`'s process exited, `how` ("signal 9", "exit code 1"). One line "exited ID HOW".
struct ExitReport {
  int island = -1;
  std::string how;
};
std::string encode_exit_report(const ExitReport& report);
// nullopt for a line that is not a report (it is logged and ignored by the caller).
std::optional<ExitReport> parse_exit_report(const std::string& line);

// "start:0,1,2" / "fail:<why>".
std::vector<uint8_t> encode_start(const StartDecision& decision);
// kCorrupt for anything else.
StatusOr<StartDecision> parse_start(const std::vector<uint8_t>& bytes);

// Which missing islands the CURVE allow-list refused: island K whose <keys_dir>/island-K.pub
// holds one of `refused_keys`. Islands without such a file cannot be told apart.
std::map<int, std::string> refused_islands(const std::string& keys_dir, int islands,
                                           const std::vector<std::string>& refused_keys);

// transport.min_islands below islands.count with an algorithm whose server role waits for
// every island (fedavg's sampled clients): a UserError naming the key.
void check_min_islands(const config::Config& config, bool server_role);

}  // namespace atl::run
