#include "transport/zmq/coordinator_state.h"

#include <algorithm>

#include "src/base/log.h"
#include "transport/star.h"

namespace atl::transport {

using proto::ErrorCode;
using proto::Message;
using proto::MsgType;

namespace {
constexpr int64_t kRestoreGraceMs = 3000;

// Why an island's run text (JOIN) is not `mine`: the first line where the two differ, each
// clipped so that the ERROR text stays within its bound.
std::string run_difference(const std::string& mine, const std::string& theirs) {
  if (theirs.empty()) return "it names no run, and this coordinator holds one";
  size_t a = 0, b = 0;
  auto line = [](const std::string& s, size_t at) {
    if (at >= s.size()) return std::string("(nothing)");
    const std::string l = s.substr(at, s.find('\n', at) - at);
    return "'" + (l.size() > 300 ? l.substr(0, 300) + "..." : l) + "'";
  };
  while (a < mine.size() && b < theirs.size()) {
    const size_t ea = std::min(mine.find('\n', a), mine.size()), eb = std::min(theirs.find('\n', b), theirs.size());
    if (mine.compare(a, ea - a, theirs, b, eb - b) != 0) break;
    a = ea + 1, b = eb + 1;
  }
  return "it is of another run: its config has " + line(theirs, b) + " where this coordinator's has " + line(mine, a) +
         " (every process of a run starts from the same config)";
}
}  // namespace

CoordinatorState::CoordinatorState(const CoordinatorOptions& options)
    : options_(options), epoch_(options.initial_epoch), star_(options.pipeline, options.max_push_elements) {
  if (!options.restore) return;
  // A restarted coordinator: the run's members, each with a fresh heartbeat deadline (its
  // replies go to the connection it uses first), the store and the records written.
  const CoordinatorSnapshot& r = *options.restore;
  epoch_ = r.epoch;
  // libzmq redials at most every 2 s (ControlClientOptions' reconnect_ivl_max): a member has
  // that much longer than heartbeat_timeout_ms to be heard from.
  const auto now = Clock::now() + std::chrono::milliseconds(kRestoreGraceMs);
  for (const auto& m : r.members) {
    Island& isl = islands_[m.id];
    isl.session = m.session;
    isl.endpoint = m.endpoint;
    isl.public_key = m.public_key;
    isl.last_seen = now;
  }
  for (const auto& [key, value] : r.store) {
    store_bytes_ += key.size() + value.size();
    store_[key] = value;
  }
  for (const auto& rec : r.records) {
    RecordMarks& marks = records_[{rec.island, rec.session}];
    marks.floor = rec.floor;
    marks.above.insert(rec.above.begin(), rec.above.end());
  }
  for (const auto& a : r.applied) {
    auto it = islands_.find(a.island);
    if (it == islands_.end() || it->second.session != a.session) continue;
    for (uint64_t rid : a.ids) applied(it->second, rid);
  }
  // The server role's clock goes on from its value at the save (the time the coordinator was
  // down is not counted: a round's deadline does not expire while nobody could deliver).
  started_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r.server_clock_s));
}

CoordinatorSnapshot CoordinatorState::snapshot() const {
  CoordinatorSnapshot s;
  s.epoch = epoch_;
  for (const auto& [id, isl] : islands_) s.members.push_back({id, isl.session, isl.endpoint, isl.public_key});
  for (const auto& [key, value] : store_)
    if (!transient(key)) s.store.emplace(key, value);
  for (const auto& [key, marks] : records_)
    s.records.push_back({key.first, key.second, marks.floor, {marks.above.begin(), marks.above.end()}});
  for (const auto& [id, isl] : islands_)
    if (!isl.applied_order.empty()) s.applied.push_back({id, isl.session, {isl.applied_order.begin(), isl.applied_order.end()}});
  s.server_clock_s = std::chrono::duration<double>(Clock::now() - started_).count();
  return s;
}

bool CoordinatorState::transient(const std::string& key) const {
  for (const auto& prefix : options_.transient_prefixes)
    if (key.rfind(prefix, 0) == 0) return true;
  return false;
}

bool CoordinatorState::new_record(int id, uint64_t session, uint64_t rid) {
  if (rid == 0) return true;
  RecordMarks& marks = records_[{id, session}];
  if (rid <= marks.floor || !marks.above.insert(rid).second) return false;
  while (!marks.above.empty() && *marks.above.begin() == marks.floor + 1) {
    marks.floor = *marks.above.begin();
    marks.above.erase(marks.above.begin());
  }
  // Sessions long gone are forgotten (bounded memory); live ones are kept.
  if (records_.size() > 1024) {
    for (auto it = records_.begin(); it != records_.end();) {
      auto isl = islands_.find(it->first.first);
      const bool live = isl != islands_.end() && isl->second.session == it->first.second;
      it = live ? std::next(it) : records_.erase(it);
    }
  }
  return true;
}

void CoordinatorState::warn(const std::string& line, Clock::time_point now) {
  uint64_t suppressed = 0;
  if (!limiter_.allow(now, &suppressed)) return;
  if (suppressed) ATOLL_WARN("coordinator: " << suppressed << " more dropped messages not logged");
  ATOLL_WARN("coordinator: " << line);
}

void CoordinatorState::drop(const std::string& why, Clock::time_point now) {
  ++dropped_;
  warn("dropped a message: " + why, now);
}

Membership CoordinatorState::membership() const {
  Membership m;
  m.epoch = epoch_;
  for (const auto& [id, isl] : islands_) m.members.push_back(Peer{id, isl.endpoint, isl.public_key});
  return m;
}

std::vector<uint8_t> CoordinatorState::reply(MsgType type, int id, uint64_t session, uint64_t rid,
                                             Message body) const {
  body.header = proto::Header{type, id, epoch_, rid, session};
  return proto::encode_or_throw(body);
}

std::vector<uint8_t> CoordinatorState::error(int id, uint64_t session, uint64_t rid, ErrorCode code,
                                             const std::string& text) const {
  return reply(MsgType::kError, id, session, rid, {.error = code, .text = text.substr(0, proto::kMaxErrorTextBytes)});
}

void CoordinatorState::on_message(const std::string& routing_id, const std::string& user_id,
                                  const Message& m, Clock::time_point now, std::vector<Outgoing>* out) {
  const proto::Header& h = m.header;
  if (!ended_.empty() && (h.type == MsgType::kJoin || h.type == MsgType::kHeartbeat)) {
    out->push_back({routing_id, error(h.island, h.session, h.request_id, ErrorCode::kRunEnded, ended_)});
    return;
  }
  switch (h.type) {
    case MsgType::kJoin: return on_join(routing_id, user_id, m, now, out);
    case MsgType::kJoinAck:
    case MsgType::kMembership:
    case MsgType::kPullReply:
    case MsgType::kStoreReply:
    case MsgType::kError:
    case MsgType::kAck: return drop(std::string(msg_type_name(h.type)) + " is not sent to a coordinator", now);
    default: break;
  }
  auto it = islands_.find(h.island);
  if (it == islands_.end() || it->second.session != h.session) {
    if (h.type == MsgType::kLeave) return;  // already gone
    const bool unknown = it == islands_.end();
    out->push_back({routing_id, error(h.island, h.session, h.request_id,
                                      unknown ? ErrorCode::kUnknownIsland : ErrorCode::kSuperseded,
                                      unknown ? "no live island " + std::to_string(h.island) + "; join again"
                                              : "another process joined as island " + std::to_string(h.island))});
    return;
  }
  Island& isl = it->second;
  if (options_.curve && user_id != isl.public_key) {
    return drop(proto::describe(h) + ": sent over a connection with another CURVE key", now);
  }
  isl.routing_id = routing_id;  // follows reconnections
  isl.last_seen = now;
  isl.suspect_deadline.reset();
  const int id = h.island;
  switch (h.type) {
    case MsgType::kHeartbeat:
      if (h.epoch != epoch_) {  // its view is stale (a MEMBERSHIP was lost): resend
        out->push_back({routing_id, reply(MsgType::kMembership, id, isl.session, 0, {.membership = membership()})});
      }
      return;
    case MsgType::kLeave:
      remove_island(id);
      return membership_changed({{id, "left", ""}}, -1, out);
    case MsgType::kSuspect: return on_suspect(id, m, now);
    case MsgType::kPush: return on_push(id, isl, m, out);
    case MsgType::kPull: return on_pull(id, isl, m, now, out);
    case MsgType::kStoreSet: return on_store_set(id, isl, m, out);
    case MsgType::kStoreGet: return on_store_get(id, isl, m, now, out);
    case MsgType::kRecord:
      if (!new_record(id, isl.session, h.request_id)) return;  // resent, and written already
      dirty_ = true;
      if (options_.record_sink) {
        options_.record_sink(std::string(reinterpret_cast<const char*>(m.bytes.data()), m.bytes.size()));
      }
      return;
    default: return;
  }
}

void CoordinatorState::end_run(const std::string& why, std::vector<Outgoing>* out) {
  if (!ended_.empty()) return;
  ended_ = why.empty() ? std::string("the coordinator ended the run") : why;
  for (const auto& [id, isl] : islands_) out->push_back({isl.routing_id, error(id, isl.session, 0, ErrorCode::kRunEnded, ended_)});
}

void CoordinatorState::on_join(const std::string& routing_id, const std::string& user_id,
                               const Message& m, Clock::time_point now, std::vector<Outgoing>* out) {
  const proto::Header& h = m.header;
  const int id = h.island;
  auto refuse = [&](const std::string& why) {
    warn("refused JOIN of island " + std::to_string(id) + ": " + why, now);
    out->push_back({routing_id, error(id, h.session, h.request_id, ErrorCode::kRejected, why)});
  };
  if (options_.expected_islands > 0 && id >= options_.expected_islands) {
    return refuse("island id " + std::to_string(id) + " outside [0, " +
                  std::to_string(options_.expected_islands) + ") (islands.count)");
  }
  if (m.run != options_.run) return refuse(run_difference(options_.run, m.run));
  if (options_.curve && m.public_key != user_id) {
    return refuse("the public key in JOIN is not the key of the CURVE connection");
  }
  auto it = islands_.find(id);
  const bool known = it != islands_.end();
  if (known && options_.curve && it->second.public_key != m.public_key) {
    // Another allowed island cannot take over this id; a restart of the island uses its key.
    return refuse("island " + std::to_string(id) + " is live with another CURVE key");
  }
  if (known && it->second.session == h.session && it->second.public_key == m.public_key) {
    // A JOIN of a live session. Resent (the same endpoint): acknowledge again, nothing changed.
    Island& isl = it->second;
    isl.routing_id = routing_id;
    isl.last_seen = now;
    if (isl.endpoint != m.endpoint) {
      // The live session publishes (or moves) its data endpoint: from this epoch on it takes
      // part in collectives (an island rejoining a running run does so once it holds the state
      // handed over to it). Its waiting requests stay.
      isl.endpoint = m.endpoint;
      membership_changed({{id, "ready", ""}}, id, out);
    }
    out->push_back(
        {routing_id, reply(MsgType::kJoinAck, id, h.session, h.request_id, {.membership = membership()})});
    return;
  }
  if (!known && islands_.size() >= proto::kMaxMembers) return refuse("the membership is full");
  if (known) remove_island(id);  // a new process with this id: its old session is over
  Island& isl = islands_[id];
  isl.session = h.session;
  isl.routing_id = routing_id;
  isl.endpoint = m.endpoint;
  isl.public_key = m.public_key;
  isl.last_seen = now;
  if (auto old = retired_.find({id, h.session}); old != retired_.end()) {
    isl.applied_order = std::move(old->second);
    isl.applied.insert(isl.applied_order.begin(), isl.applied_order.end());
    retired_.erase(old);
    std::erase(retired_order_, std::pair<int, uint64_t>{id, h.session});
  }
  // Epochs never go back, even across a coordinator restart: the islands remember theirs.
  // (A claim beyond 2^62 is ignored: no overflow back to 0.)
  if (h.epoch < (uint64_t{1} << 62)) epoch_ = std::max(epoch_, h.epoch);
  membership_changed({{id, known ? "rejoined" : "joined", ""}}, id, out);
  out->push_back({routing_id, reply(MsgType::kJoinAck, id, h.session, h.request_id, {.membership = membership()})});
  if (options_.expected_islands > 0 && !all_present_logged_ &&
      static_cast<int>(islands_.size()) == options_.expected_islands) {
    all_present_logged_ = true;
    ATOLL_INFO("coordinator: all " << options_.expected_islands << " islands joined (epoch " << epoch_ << ")");
  }
}

void CoordinatorState::on_suspect(int id, const Message& m, Clock::time_point now) {
  auto it = islands_.find(m.peer);
  if (it == islands_.end() || m.peer == id) return;  // already gone (or nonsense)
  if (!it->second.suspect_deadline) {
    it->second.suspect_deadline =
        now + std::chrono::milliseconds(options_.heartbeat_ms * options_.suspect_heartbeats);
    ATOLL_INFO("coordinator: island " << id << " suspects island " << m.peer << "; waiting for its heartbeat");
  }
}

void CoordinatorState::on_tick(Clock::time_point now, std::vector<Outgoing>* out) {
  std::vector<MemberChange> failed;
  for (auto it = islands_.begin(); it != islands_.end();) {
    const Island& isl = it->second;
    const int64_t silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - isl.last_seen).count();
    std::string why;
    if (silent > options_.heartbeat_timeout_ms) {
      why = "no heartbeat for " + std::to_string(silent) + " ms";
    } else if (isl.suspect_deadline && now >= *isl.suspect_deadline) {
      why = "suspected by a peer and silent for " + std::to_string(silent) + " ms";
    }
    const int id = it->first;
    ++it;
    if (why.empty()) continue;
    ATOLL_WARN("coordinator: island " << id << " declared dead: " << why);
    remove_island(id);
    failed.push_back({id, "failed", why});
  }
  if (!failed.empty()) membership_changed(failed, -1, out);
  // Deadlines of the server role (fedavg's round_timeout_s) pass while islands wait on it.
  if (options_.server && std::any_of(pending_.begin(), pending_.end(), [](const Pending& p) {
        return p.type == MsgType::kPull && !star::is_star_tag(p.tag);
      }))
    server_time(now, out);

  answer_pending(out, [&](const Pending& p, const Island&) -> std::optional<std::vector<uint8_t>> {
    if (!p.deadline || now < *p.deadline) return std::nullopt;
    return error(p.island, p.session, p.request_id, ErrorCode::kTimeout, p.what());
  });
}

void CoordinatorState::remove_island(int id) {
  auto it = islands_.find(id);
  if (it == islands_.end()) return;
  if (!it->second.applied_order.empty()) {
    const std::pair<int, uint64_t> key{id, it->second.session};
    if (retired_.emplace(key, std::move(it->second.applied_order)).second) retired_order_.push_back(key);
    if (retired_order_.size() > 256) {
      retired_.erase(retired_order_.front());
      retired_order_.pop_front();
    }
  }
  islands_.erase(it);
  std::erase_if(pending_, [id](const Pending& p) { return p.island == id; });
  star_.forget(id);
  all_present_logged_ = false;
}

void CoordinatorState::membership_changed(const std::vector<MemberChange>& changes, int skip,
                                          std::vector<Outgoing>* out) {
  ++epoch_;
  urgent_ = true;
  const Membership current = membership();
  for (const auto& [id, isl] : islands_) {
    if (id == skip) continue;
    out->push_back({isl.routing_id, reply(MsgType::kMembership, id, isl.session, 0, {.membership = current})});
  }
  std::string ids;
  for (const Peer& p : current.members) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(p.id);
  }
  ATOLL_INFO("coordinator: epoch " << epoch_ << ", members [" << ids << "]: " << describe(changes));
  star_.on_membership(collective_members(current));  // star all-reduces no longer waiting for anyone complete
  // The server role drops a lost island from what it waits for (fedavg: the open round).
  bool server_changed = false;
  if (options_.server) {
    const double at = std::chrono::duration<double>(Clock::now() - started_).count();
    for (const MemberChange& c : changes)
      if (c.change == "failed" || c.change == "left") server_changed |= options_.server->on_member_lost(c.island, at);
  }
  answer_pulls(out, /*star_only=*/!server_changed);
  if (options_.on_membership) options_.on_membership(current, changes);
}

void CoordinatorState::server_time(Clock::time_point now, std::vector<Outgoing>* out) {
  if (options_.server->on_time(std::chrono::duration<double>(now - started_).count()) < 0) return;
  urgent_ = true;  // a round closed at its deadline: saved before the answers leave
  answer_pulls(out);
}

void CoordinatorState::wait_or_fail(const Island& isl, Pending p, uint32_t wait_ms, Clock::time_point now,
                                    std::vector<Outgoing>* out) {
  auto fail = [&](ErrorCode code, const std::string& why) {
    out->push_back({isl.routing_id, error(p.island, p.session, p.request_id, code, why)});
  };
  if (wait_ms == 0) return fail(ErrorCode::kTimeout, p.what());
  for (const Pending& q : pending_) {  // a resent request (after a reconnect) waits once
    if (q.island == p.island && q.session == p.session && q.request_id == p.request_id) return;
  }
  if (static_cast<int>(pending_.size()) >= options_.max_pending) {
    return fail(ErrorCode::kLimit, "too many waiting requests at the coordinator");
  }
  if (wait_ms != proto::kWaitForever) p.deadline = now + std::chrono::milliseconds(wait_ms);
  pending_.push_back(std::move(p));
}

void CoordinatorState::answer_pending(std::vector<Outgoing>* out, const Answer& answer) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto isl = islands_.find(it->island);
    std::optional<std::vector<uint8_t>> reply;
    if (isl != islands_.end() && !(reply = answer(*it, isl->second))) {
      ++it;
      continue;
    }
    if (reply) out->push_back({isl->second.routing_id, std::move(*reply)});
    it = pending_.erase(it);
  }
}

}  // namespace atl::transport
