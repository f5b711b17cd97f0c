// The cross-key rules of a config (src/config/cross_field.h).
#include "src/config/cross_field.h"

#include <algorithm>
#include <string>
#include <vector>

#include "src/config/schema.h"
#include "src/data/kinds.h"

namespace atl::config {

// Rules that tie two keys together; checked once the file and every override are applied.
void check_cross_field(const Config& c) {
  if (c.model.dim % c.model.heads != 0) {
    fail_key(c, "model.heads",
             "model.dim (" + std::to_string(c.model.dim) + ") must be divisible by model.heads (" +
                 std::to_string(c.model.heads) + ")",
             c.origins.count("model.heads") ? "" : "model.dim");
  }
  if (const data::DataKind* kind = data::find_data_kind(c.data.kind); c.data.normalize != "none" && kind && kind->language)
    fail_key(c, "data.normalize", "standardises image or feature data (data.kind idx or synthetic); data.kind '" + c.data.kind +
             "' is tokens (use none)");
  const int k = c.islands.count;
  int max_islands = k;  // ids that can exist once `add` events have run
  for (const auto& e : c.islands.events) max_islands += e.add;
  auto count_problem = [&](const char* key, size_t n) {
    if (n != 0 && static_cast<int>(n) != k && static_cast<int>(n) != max_islands)
      fail_key(c, key, "has " + std::to_string(n) + " entries but islands.count is " +
                                       std::to_string(k) + " (one entry per island, or none)");
  };
  if (c.transport.min_islands > k)
    fail_key(c, "transport.min_islands", std::to_string(c.transport.min_islands) + " is more than islands.count (" + std::to_string(k) + ")");
  count_problem("compute.speeds", c.compute.speeds.size());
  if (const auto n = static_cast<int>(c.islands.ranks.values.size()); n > 1 && n != k && n != max_islands)
    fail_key(c, "islands.ranks", "has " + std::to_string(n) + " entries but islands.count is " + std::to_string(k) +
                                     " (one number for every island, or one per island)");
  for (int r : c.islands.ranks.values) {
    if (c.train.batch_size % r != 0)
      fail_key(c, "islands.ranks",
               std::to_string(r) + " ranks do not divide train.batch_size (" + std::to_string(c.train.batch_size) +
                   "): each rank takes batch_size / ranks rows of every batch");
  }
  count_problem("network.regions", c.network.regions.size());
  for (int island : c.slurm.islands)
    if (island >= k)
      fail_key(c, "slurm.islands", "island " + std::to_string(island) + " does not exist (islands.count is " +
                                       std::to_string(k) + ")");
  if (!c.hosts.islands.empty() && static_cast<int>(c.hosts.islands.size()) != k)
    fail_key(c, "hosts.islands", "has " + std::to_string(c.hosts.islands.size()) + " entries but islands.count is " +
             std::to_string(k) + " (one host per island)");
  const auto& regions = c.network.regions;
  auto known_region = [&](const std::string& key, const std::string& r) {
    if (std::find(regions.begin(), regions.end(), r) != regions.end()) return;
    std::vector<std::string> names(regions.begin(), regions.end());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    auto near = schema::closest(r, names);
    fail_key(c, key,
             "unknown region '" + r + "'" +
             (names.empty() ? " (network.regions assigns islands to regions; it is empty)"
                            : " (regions: " + schema::join(names) + ")" + (near ? " (did you mean '" + *near + "'?)" : "")),
             key.substr(0, key.find('[')));
  };
  if (!c.network.server_region.empty()) known_region("network.server_region", c.network.server_region);
  for (size_t i = 0; i < c.network.links.size(); ++i) {
    const auto& l = c.network.links[i];
    const std::string key = "network.links[" + std::to_string(i) + "]";
    if (l.between.size() != 2)
      fail_key(c, key + ".between", "expected two region names, e.g. [us, eu]", "network.links");
    for (const auto& r : l.between) known_region(key + ".between", r);
  }
  for (size_t i = 0; i < c.islands.events.size(); ++i) {
    const auto& e = c.islands.events[i];
    const std::string key = "islands.events[" + std::to_string(i) + "]";
    auto fail_event = [&](const std::string& k, const std::string& problem) {
      fail_key(c, k, problem, "islands.events");
    };
    const int actions = (e.kill >= 0) + (e.rejoin >= 0) + (e.add > 0) + !e.partition.empty();
    if (actions != 1)
      fail_event(key, "needs exactly one of kill, rejoin, add, partition (found " +
                           std::to_string(actions) + ")");
    const int triggers = (e.at_step >= 0) + (e.at_time_s >= 0);
    if (triggers != 1)
      fail_event(key, "needs exactly one of at_step, at_time_s (found " + std::to_string(triggers) + ")");
    if (e.at_step >= 0 && e.kill < 0)
      fail_event(key + ".at_step", "at_step triggers only kill events (an island that is not "
                                    "running has no steps); use at_time_s");
    const int id = std::max(e.kill, e.rejoin);
    if (id >= max_islands)
      fail_event(key, "island " + std::to_string(id) + " does not exist (islands.count is " +
                           std::to_string(k) + ")");
    if (!e.partition.empty()) {
      if (e.partition.size() != 2)
        fail_event(key + ".partition", "expected two region names, e.g. [us, eu]");
      for (const auto& r : e.partition) known_region(key + ".partition", r);
      if (e.duration_s <= 0) fail_event(key + ".duration_s", "a partition needs duration_s > 0");
    }
  }
}


}  // namespace atl::config
