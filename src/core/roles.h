// Who plays which role among a run's islands, one rule for both modes (docs/architecture.md
// "Roles"). Each mode brings its own view of the islands that are running — the simulator's
// (alive and unfinished), a real island's (the members that take part in collectives) — as
// ascending island ids; the rules decide the same on the same view.
//
//   lead:   the lowest running island among those that evaluate the same path (a dense run
//           has one path) evaluates the global model, reports progress and writes the final
//           parameters;
//   donor:  the lowest running island that holds the state a joiner needs (its path's) hands
//           it over (src/core/handover.h).
#pragma once

#include <functional>
#include <vector>

namespace atl::config {
struct Config;
}

namespace atl::core {

class Roles {
 public:
  // The run's paths: eval_path_of(config, island); `config` must outlive the roles.
  explicit Roles(const config::Config& config);
  // Islands on the paths `eval_path` gives (a test's own).
  explicit Roles(std::function<int(int island)> eval_path) : eval_path_(std::move(eval_path)) {}
  // A dense run: one path.
  static Roles dense() {
    return Roles([](int) { return -1; });
  }

  // The path whose validation sequences `island` evaluates.
  int eval_path(int island) const { return eval_path_(island); }
  // Whether `donor` holds the state `joiner` needs: both on one path (every island of a
  // dense run).
  bool holds(int donor, int joiner) const { return eval_path(donor) == eval_path(joiner); }
  // Whether `island` leads its path: no island of `running` below it evaluates the same path.
  // `island` itself need not be running (a finished island evaluates the steps it kept).
  bool leads(int island, const std::vector<int>& running) const;
  // Whether `island` leads the whole run: no island of `running` is below it.
  static bool leads_run(int island, const std::vector<int>& running) {
    return running.empty() || running.front() >= island;
  }
  // The donor of `joiner`: the lowest island of `running` other than it that holds its
  // state; -1 when there is none.
  int donor(int joiner, const std::vector<int>& running) const;

 private:
  std::function<int(int)> eval_path_;
};

}  // namespace atl::core
