#include "src/run/start_gate.h"

#include <algorithm>
#include <filesystem>

#include "transport/zmq/curve.h"

namespace atl::run {

namespace {

std::string id_list(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out.append(out.empty() ? "" : ",").append(std::to_string(id));
  return out;
}

std::string missing_text(const JoinView& v, const std::vector<int>& missing) {
  std::string out;
  for (int id : missing) {
    std::string why = "never connected";
    if (auto r = v.refused.find(id); r != v.refused.end()) why = r->second;
    else if (auto g = v.gone.find(id); g != v.gone.end()) why = "its process ended with " + g->second + " before it joined";
    else if (v.left.count(id)) why = "joined, then left or died before the start";
    out += (out.empty() ? "" : ", ") + ("island " + std::to_string(id) + " (" + why + ")");
  }
  return out;
}

}  // namespace

std::optional<StartDecision> decide_start(const JoinView& v) {
  std::vector<int> joined = v.joined;
  std::sort(joined.begin(), joined.end());
  std::vector<int> missing;     // not joined now
  std::vector<int> may_come;    // missing and not refused: could still join
  for (int id = 0; id < v.islands; ++id) {
    if (std::binary_search(joined.begin(), joined.end(), id)) continue;
    missing.push_back(id);
    if (!v.refused.count(id) && !v.gone.count(id)) may_come.push_back(id);
  }
  const int n = static_cast<int>(joined.size());
  const std::string counts = std::to_string(n) + " of " + std::to_string(v.islands) + " islands";
  const std::string min = "transport.min_islands " + std::to_string(v.min_islands);
  StartDecision d;
  if (missing.empty() || (n >= v.min_islands && (v.timed_out || may_come.empty()))) {
    d.start = true;
    d.islands = joined;
    if (!missing.empty()) d.why = "starting with " + counts + " (" + min + "); missing: " + missing_text(v, missing);
    return d;
  }
  if (v.timed_out || n + static_cast<int>(may_come.size()) < v.min_islands) {
    d.why = (v.timed_out ? "only " + counts + " joined within transport.join_timeout_s (" +
                               std::to_string(static_cast<int64_t>(v.join_timeout_s)) + " s)"
                         : counts + " joined and the others cannot")
            + ", fewer than " + min + "; missing: " + missing_text(v, missing);
    return d;
  }
  return std::nullopt;
}

std::vector<int> still_expected(const JoinView& v) {
  std::vector<int> out;
  for (int id = 0; id < v.islands; ++id) {
    if (std::find(v.joined.begin(), v.joined.end(), id) != v.joined.end()) continue;
    if (!v.refused.count(id) && !v.gone.count(id)) out.push_back(id);
  }
  return out;
}

std::string encode_exit_report(const ExitReport& r) { return "exited " + std::to_string(r.island) + " " + r.how; }

std::optional<ExitReport> parse_exit_report(const std::string& line) {
  const std::string prefix = "exited ";
  if (line.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t space = line.find(' ', prefix.size());
  const std::string id = line.substr(prefix.size(), space == std::string::npos ? std::string::npos : space - prefix.size());
  if (id.empty() || id.size() > 6 || id.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  ExitReport r;
  r.island = std::stoi(id);
  r.how = space == std::string::npos ? "" : line.substr(space + 1);
  if (r.how.empty() || r.how.size() > 200) return std::nullopt;
  return r;
}

std::vector<uint8_t> encode_start(const StartDecision& d) {
  const std::string text = d.start ? "start:" + id_list(d.islands) : "fail:" + d.why;
  return std::vector<uint8_t>(text.begin(), text.end());
}

StatusOr<StartDecision> parse_start(const std::vector<uint8_t>& bytes) {
  const std::string text(bytes.begin(), bytes.end());
  StartDecision d;
  if (text.rfind("fail:", 0) == 0) {
    d.why = text.substr(5);
    return d;
  }
  if (text.rfind("start:", 0) != 0) return Status(StatusCode::kCorrupt, "start decision '" + text + "' not understood");
  d.start = true;
  const std::string rest = text.substr(6);
  if (rest.empty() || rest.back() == ',') return Status(StatusCode::kCorrupt, "start decision '" + text + "' not understood");
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t comma = rest.find(',', pos);
    if (comma == std::string::npos) comma = rest.size();
    const std::string item = rest.substr(pos, comma - pos);
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos)
      return Status(StatusCode::kCorrupt, "start decision '" + text + "' not understood");
    d.islands.push_back(std::stoi(item));
    pos = comma + 1;
  }
  return d;
}

std::map<int, std::string> refused_islands(const std::string& keys_dir, int islands,
                                           const std::vector<std::string>& refused_keys) {
  std::map<int, std::string> out;
  if (refused_keys.empty()) return out;
  for (int id = 0; id < islands; ++id) {
    const std::string path = keys_dir + "/island-" + std::to_string(id) + ".pub";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    StatusOr<std::string> key = transport::curve::load_public_key(path);
    if (!key.is_ok() || std::find(refused_keys.begin(), refused_keys.end(), *key) == refused_keys.end()) continue;
    out[id] = "CURVE key refused: " + path + " is not in " + keys_dir + "/allowed/";
  }
  return out;
}

void check_min_islands(const config::Config& config, bool server_role) {
  const int min = config.transport.min_islands;
  if (!server_role || min == 0 || min >= config.islands.count) return;
  config::fail_key(config, "transport.min_islands",
                   "must be islands.count (or 0) with " + config.algorithm.name +
                       ", whose global model lives in the coordinator's server role: it plans its rounds "
                       "for every island");
}

}  // namespace atl::run
