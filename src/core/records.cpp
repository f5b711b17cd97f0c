#include "src/core/records.h"

#include "src/core/json.h"

#include <cmath>
#include <type_traits>

namespace atl::core {

namespace {

// Every record ends with its clocks.
std::string with_time(JsonObject& o, const RecordTime& t) {
  return o.add("wall_time_s", t.wall_s).add("sim_time_s", t.sim_s).str();
}

std::string id_list(const std::vector<int>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += ']';
  return out;
}

}  // namespace

std::string train_record(int island, int64_t step, double loss, double lr, const RecordTime& t) {
  JsonObject o;
  o.add("event", "train").add("island", island).add("step", step).add("loss", loss).add("lr", lr);
  return with_time(o, t);
}

std::string round_record(int island, const algorithms::RoundInfo& r, const RoundTimes& times, const RecordTime& t) {
  const double ratio = r.bytes_sent > 0 ? static_cast<double>(r.raw_bytes_sent) / static_cast<double>(r.bytes_sent) : 1.0;
  JsonObject o;
  o.add("event", "round")
      .add("island", island)
      .add("round", r.round)
      .add("step", r.step)
      .add("contributors", r.contributors)
      .add("members", r.members)
      .add("bytes_sent", r.bytes_sent)
      .add("bytes_recv", r.bytes_received)
      .add("compression_ratio", ratio)
      .add("outer_grad_norm", r.outer_grad_norm);
  with_time(o, t);
  return o.add("compute_s", times.compute_s)
      .add("comm_s", times.comm_s)
      .add("idle_s", times.idle_s)
      .add("sync_s", times.sync_s)
      .str();
}

namespace {

template <class T>
std::string json_list(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ",";
    if constexpr (std::is_floating_point_v<T>) {
      out += std::isfinite(v[i]) ? json_number(v[i]) : "null";
    } else {
      out += std::to_string(v[i]);
    }
  }
  return out + "]";
}

}  // namespace

std::string server_round_record(const algorithms::ServerRound& r, int64_t step, const RecordTime& t) {
  JsonObject o;
  o.add("event", "round")
      .add("island", -1)
      .add("round", r.round)
      .add("step", step)
      .add("contributors", static_cast<int64_t>(r.delivered.size()))
      .add("selected", r.selected)
      .add_raw("delivered", id_list(r.delivered))
      .add_raw("lost", id_list(r.lost))
      .add_raw("late", id_list(r.late))
      .add("skipped", r.skipped);
  return with_time(o, t);
}

std::string eval_record(int island, int64_t step, const EvalResult& r, bool classifier, uint64_t bytes_sent,
                        const RecordTime& t) {
  JsonObject o;
  if (r.path >= 0) {  // one path on its routed sequences
    o.add("event", "path_eval").add("step", step).add("path", r.path).add("paths", r.paths).add("val_loss", r.loss);
    o.add("tokens", r.count).add("sequences", r.sequences).add("train_sequences", r.train_sequences);
    o.add("island", island).add("bytes_sent_total", bytes_sent);
    return with_time(o, t);
  }
  o.add("event", "eval").add("step", step).add("val_loss", r.loss);
  if (classifier) o.add("val_accuracy", r.accuracy);
  o.add("island", island).add("bytes_sent_total", bytes_sent);
  if (r.paths > 0) {  // the routed loss over the paths' records
    o.add("paths", r.paths)
        .add("tokens", r.count)
        .add_raw("path_val_losses", json_list(r.path_losses))
        .add_raw("path_tokens", json_list(r.path_tokens))
        .add_raw("path_sequences", json_list(r.path_sequences))
        .add_raw("path_train_sequences", json_list(r.path_train_sequences));
  }
  return with_time(o, t);
}

std::string reshard_record(const Reshard& r, const RecordTime& t) {
  JsonObject o;
  o.add("event", "reshard")
      .add("island", r.island)
      .add("step", r.step)
      .add("router_sequences", r.router_sequences)
      .add_raw("labels", json_list(r.labels))
      .add_raw("path_train_sequences", json_list(r.path_train_sequences))
      .add_raw("path_val_sequences", json_list(r.path_val_sequences))
      .add("moved", r.moved)
      .add("balance_error", r.balance_error)
      .add("contributors", r.contributors);
  return with_time(o, t);
}

std::string island_end_record(const IslandEnd& e, const RecordTime& t) {
  JsonObject o;
  o.add("event", "island_end")
      .add("island", e.island)
      .add("steps", e.steps)
      .add("bytes_sent", e.bytes_sent)
      .add("bytes_recv", e.bytes_recv)
      .add("raw_sent", e.raw_sent)
      .add("global_xxh64", e.global_xxh64);
  return with_time(o, t);
}

std::string rejoin_record(const Rejoin& r, const RecordTime& t) {
  JsonObject o;
  o.add("event", "rejoin")
      .add("island", r.island)
      .add("donor", r.donor)
      .add("step", r.step)
      .add("round", r.round)
      .add("first_seq", r.first_seq)
      .add("epoch", r.epoch);
  return with_time(o, t);
}

std::string membership_record(const MembershipChange& m, const RecordTime& t) {
  std::string ids;
  for (int id : m.members) ids.append(ids.empty() ? "" : ",").append(std::to_string(id));
  JsonObject o;
  o.add("event", "membership").add("island", m.island).add("change", m.change).add("reason", m.reason);
  if (m.step >= 0) {
    o.add("step", m.step);
  } else {
    o.add_raw("step", "null");
  }
  o.add("epoch", m.epoch).add_raw("members", "[" + ids + "]").add("size", static_cast<int64_t>(m.members.size()));
  return with_time(o, t);
}

}  // namespace atl::core
