// The table of every config key and its allowed values. The range rules are the ones
// documented in config.h; keep the two in step.
#include "src/config/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace atl::config::schema {
namespace {

// Builds a Field from pointers to members: field("steps", &Config::train, &TrainConfig::steps).
template <typename S, typename T>
Field field(std::string name, S Config::*section, T S::*member, Check check = {}) {
  return {std::move(name),
          [section, member](Config& c) -> FieldRef { return &(c.*section.*member); },
          std::move(check)};
}

std::vector<Section> build() {
  const Check nonneg = at_least(0), positive_int = at_least(1), unit_open = closed_open(0, 1);
  std::vector<Section> s;
  s.push_back({"run",
               {field("name", &Config::run, &RunConfig::name),
                field("seed", &Config::run, &RunConfig::seed),
                field("out_dir", &Config::run, &RunConfig::out_dir),
                field("threads", &Config::run, &RunConfig::threads, nonneg),
                field("device", &Config::run, &RunConfig::device),
                field("resume", &Config::run, &RunConfig::resume)}});
  s.push_back({"model",
               {field("name", &Config::model, &ModelConfig::name),  // the registry checks it
                field("layers", &Config::model, &ModelConfig::layers, positive_int),
                field("heads", &Config::model, &ModelConfig::heads, positive_int),
                field("dim", &Config::model, &ModelConfig::dim, positive_int),
                field("seq_len", &Config::model, &ModelConfig::seq_len, positive_int),
                field("vocab", &Config::model, &ModelConfig::vocab, positive_int),
                field("dropout", &Config::model, &ModelConfig::dropout, unit_open),
                field("tie_embeddings", &Config::model, &ModelConfig::tie_embeddings),
                field("init_from", &Config::model, &ModelConfig::init_from),
                field("hidden", &Config::model, &ModelConfig::hidden, positive_int),
                field("classes", &Config::model, &ModelConfig::classes, nonneg),
                field("input_dim", &Config::model, &ModelConfig::input_dim, nonneg)}});
  s.push_back({"data",
               {field("kind", &Config::data, &DataConfig::kind,
                      one_of({"text", "tokens", "idx", "synthetic"})),
                field("path", &Config::data, &DataConfig::path),
                field("labels_path", &Config::data, &DataConfig::labels_path),
                field("val_path", &Config::data, &DataConfig::val_path),
                field("val_labels_path", &Config::data, &DataConfig::val_labels_path),
                field("val_fraction", &Config::data, &DataConfig::val_fraction, open_open(0, 1)),
                field("partition", &Config::data, &DataConfig::partition,
                      one_of({"iid", "contiguous", "dirichlet", "shards"})),
                field("dirichlet_alpha", &Config::data, &DataConfig::dirichlet_alpha, above(0)),
                field("shards_per_island", &Config::data, &DataConfig::shards_per_island,
                      positive_int),
                field("synthetic_examples", &Config::data, &DataConfig::synthetic_examples,
                      positive_int),
                field("synthetic_dim", &Config::data, &DataConfig::synthetic_dim, positive_int),
                field("synthetic_classes", &Config::data, &DataConfig::synthetic_classes,
                      at_least(2))}});
  s.push_back({"train",
               {field("optimizer", &Config::train, &TrainConfig::optimizer,
                      one_of({"adamw", "sgd"})),
                field("lr", &Config::train, &TrainConfig::lr, above(0)),
                field("min_lr_ratio", &Config::train, &TrainConfig::min_lr_ratio, closed(0, 1)),
                field("schedule", &Config::train, &TrainConfig::schedule,
                      one_of({"cosine", "constant"})),
                field("warmup_steps", &Config::train, &TrainConfig::warmup_steps, nonneg),
                field("beta1", &Config::train, &TrainConfig::beta1, unit_open),
                field("beta2", &Config::train, &TrainConfig::beta2, unit_open),
                field("eps", &Config::train, &TrainConfig::eps, above(0)),
                field("weight_decay", &Config::train, &TrainConfig::weight_decay, nonneg),
                field("momentum", &Config::train, &TrainConfig::momentum, unit_open),
                field("grad_clip", &Config::train, &TrainConfig::grad_clip, nonneg),
                field("batch_size", &Config::train, &TrainConfig::batch_size, positive_int),
                field("grad_accum", &Config::train, &TrainConfig::grad_accum, positive_int),
                field("steps", &Config::train, &TrainConfig::steps, positive_int),
                field("eval_every", &Config::train, &TrainConfig::eval_every, nonneg),
                field("eval_batches", &Config::train, &TrainConfig::eval_batches, nonneg),
                field("log_every", &Config::train, &TrainConfig::log_every, positive_int),
                field("target_loss", &Config::train, &TrainConfig::target_loss, nonneg)}});
  s.push_back({"islands",
               {field("count", &Config::islands, &IslandsConfig::count, positive_int),
                field("events", &Config::islands, &IslandsConfig::events)}});
  s.push_back({"algorithm",
               {field("name", &Config::algorithm, &AlgorithmConfig::name),  // registry checks it
                field("inner_steps", &Config::algorithm, &AlgorithmConfig::inner_steps,
                      positive_int),
                field("outer_optimizer", &Config::algorithm, &AlgorithmConfig::outer_optimizer,
                      one_of({"nesterov", "sgd", "adam"})),
                field("outer_lr", &Config::algorithm, &AlgorithmConfig::outer_lr, above(0)),
                field("outer_momentum", &Config::algorithm, &AlgorithmConfig::outer_momentum,
                      unit_open),
                field("outer_beta1", &Config::algorithm, &AlgorithmConfig::outer_beta1, unit_open),
                field("outer_beta2", &Config::algorithm, &AlgorithmConfig::outer_beta2, unit_open),
                field("outer_eps", &Config::algorithm, &AlgorithmConfig::outer_eps, above(0)),
                field("weighting", &Config::algorithm, &AlgorithmConfig::weighting,
                      one_of({"uniform", "shard_size"})),
                field("client_fraction", &Config::algorithm, &AlgorithmConfig::client_fraction,
                      open_closed(0, 1)),
                field("rounds", &Config::algorithm, &AlgorithmConfig::rounds, nonneg),
                field("local_steps", &Config::algorithm, &AlgorithmConfig::local_steps, nonneg),
                field("local_epochs", &Config::algorithm, &AlgorithmConfig::local_epochs,
                      positive_int),
                field("error_feedback", &Config::algorithm, &AlgorithmConfig::error_feedback, {}),
                field("overlap", &Config::algorithm, &AlgorithmConfig::overlap,
                      one_of({"none", "delayed", "eager"})),
                field("fragments", &Config::algorithm, &AlgorithmConfig::fragments, positive_int),
                field("fragment_mode", &Config::algorithm, &AlgorithmConfig::fragment_mode,
                      one_of({"strided", "sequential"})),
                field("overlap_steps", &Config::algorithm, &AlgorithmConfig::overlap_steps, nonneg),
                field("mix_alpha", &Config::algorithm, &AlgorithmConfig::mix_alpha, closed(0, 1)),
                field("async_update", &Config::algorithm, &AlgorithmConfig::async_update,
                      one_of({"delayed_nesterov", "naive"})),
                field("buffer_size", &Config::algorithm, &AlgorithmConfig::buffer_size, nonneg),
                field("dn_c", &Config::algorithm, &AlgorithmConfig::dn_c, closed(0, 1)),
                field("dynamic_local_updates", &Config::algorithm,
                      &AlgorithmConfig::dynamic_local_updates, {}),
                field("min_local_steps", &Config::algorithm, &AlgorithmConfig::min_local_steps,
                      positive_int),
                field("grace_s", &Config::algorithm, &AlgorithmConfig::grace_s, nonneg)}});
  s.push_back(
      {"transport",
       {field("kind", &Config::transport, &TransportConfig::kind, one_of({"zmq", "gloo"})),
        field("collective", &Config::transport, &TransportConfig::collective, one_of({"ring", "star"})),
        field("coordinator", &Config::transport, &TransportConfig::coordinator, {}),
        field("host", &Config::transport, &TransportConfig::host, {}),
        field("base_port", &Config::transport, &TransportConfig::base_port, closed(1, 65535)),
        field("heartbeat_ms", &Config::transport, &TransportConfig::heartbeat_ms, at_least(1)),
        field("heartbeat_timeout_ms", &Config::transport, &TransportConfig::heartbeat_timeout_ms, at_least(1)),
        field("max_rejoins", &Config::transport, &TransportConfig::max_rejoins, at_least(0)),
        field("bandwidth_mbps", &Config::transport, &TransportConfig::bandwidth_mbps, above(0)),
        field("timeout_slack", &Config::transport, &TransportConfig::timeout_slack, at_least(1)),
        field("chunk_bytes", &Config::transport, &TransportConfig::chunk_bytes, at_least(1024)),
        field("max_in_flight", &Config::transport, &TransportConfig::max_in_flight, at_least(1)),
        field("curve", &Config::transport, &TransportConfig::curve, {}),
        field("keys_dir", &Config::transport, &TransportConfig::keys_dir, {})}});
  s.push_back(
      {"compute",
       {field("step_time_s", &Config::compute, &ComputeConfig::step_time_s, nonneg),
        field("flops", &Config::compute, &ComputeConfig::flops, above(0)),
        field("mfu", &Config::compute, &ComputeConfig::mfu, open_closed(0, 1)),
        field("speeds", &Config::compute, &ComputeConfig::speeds, above(0)),
        field("jitter", &Config::compute, &ComputeConfig::jitter, closed(0, 2)),
        field("straggler_prob", &Config::compute, &ComputeConfig::straggler_prob, closed(0, 1)),
        field("straggler_factor", &Config::compute, &ComputeConfig::straggler_factor, at_least(1)),
        field("straggler_steps", &Config::compute, &ComputeConfig::straggler_steps, positive_int)}});
  s.push_back(
      {"network",
       {field("bandwidth_mbps", &Config::network, &NetworkConfig::bandwidth_mbps, above(0)),
        field("up_mbps", &Config::network, &NetworkConfig::up_mbps, nonneg),
        field("down_mbps", &Config::network, &NetworkConfig::down_mbps, nonneg),
        field("latency_ms", &Config::network, &NetworkConfig::latency_ms, nonneg),
        field("jitter_ms", &Config::network, &NetworkConfig::jitter_ms, nonneg),
        field("loss", &Config::network, &NetworkConfig::loss, closed_open(0, 1)),
        field("regions", &Config::network, &NetworkConfig::regions),
        field("links", &Config::network, &NetworkConfig::links),
        field("server_region", &Config::network, &NetworkConfig::server_region)}});
  s.push_back({"hosts",
               {field("coordinator", &Config::hosts, &HostsConfig::coordinator),
                field("islands", &Config::hosts, &HostsConfig::islands),
                field("workdir", &Config::hosts, &HostsConfig::workdir),
                field("binary", &Config::hosts, &HostsConfig::binary)}});
  return s;
}

template <typename R, typename T>
RecordField<R> record(std::string name, T R::*member, Check check = {}) {
  return {std::move(name), [member](R& r) -> FieldRef { return &(r.*member); }, std::move(check)};
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Bounds print without a trailing ".0": "[0, 1)", ">= 1".
std::string bound(double v) {
  std::string s = format_double(v);
  if (s.size() > 2 && s.ends_with(".0")) s.resize(s.size() - 2);
  return s;
}

Check interval(std::optional<double> lo, bool lo_open, std::optional<double> hi, bool hi_open) {
  Check c;
  c.lo = lo;
  c.lo_open = lo_open;
  c.hi = hi;
  c.hi_open = hi_open;
  return c;
}

}  // namespace

std::string Check::check_number(double v) const {
  // Written so that NaN fails every bound.
  const bool lo_ok = !lo || (lo_open ? v > *lo : v >= *lo);
  const bool hi_ok = !hi || (hi_open ? v < *hi : v <= *hi);
  if (lo_ok && hi_ok) return "";
  std::string rule;
  if (lo && hi) {
    rule = "must be in " + std::string(lo_open ? "(" : "[") + bound(*lo) + ", " + bound(*hi) +
           (hi_open ? ")" : "]");
  } else if (lo) {
    rule = std::string(lo_open ? "must be > " : "must be >= ") + bound(*lo);
  } else {
    rule = std::string(hi_open ? "must be < " : "must be <= ") + bound(*hi);
  }
  const bool integral = std::trunc(v) == v && std::fabs(v) < 1e18;
  return rule + " (got " + (integral ? std::to_string(static_cast<int64_t>(v)) : format_double(v)) +
         ")";
}

std::string Check::check_name(const std::string& v) const {
  if (names.empty() || std::find(names.begin(), names.end(), v) != names.end()) return "";
  std::string msg = "'" + v + "' is not one of: " + join(names);
  if (auto near = closest(v, names)) msg += " (did you mean '" + *near + "'?)";
  return msg;
}

Check at_least(double lo) { return interval(lo, false, std::nullopt, false); }
Check above(double lo) { return interval(lo, true, std::nullopt, false); }
Check closed_open(double lo, double hi) { return interval(lo, false, hi, true); }
Check open_closed(double lo, double hi) { return interval(lo, true, hi, false); }
Check open_open(double lo, double hi) { return interval(lo, true, hi, true); }
Check closed(double lo, double hi) { return interval(lo, false, hi, false); }
Check one_of(std::vector<std::string> names) {
  Check c;
  c.names = std::move(names);
  return c;
}

const std::vector<RecordField<IslandEvent>>& event_fields() {
  static const std::vector<RecordField<IslandEvent>> table = {
      record("kill", &IslandEvent::kill, at_least(0)),
      record("rejoin", &IslandEvent::rejoin, at_least(0)),
      record("add", &IslandEvent::add, at_least(1)),
      record("partition", &IslandEvent::partition),
      record("at_step", &IslandEvent::at_step, at_least(0)),
      record("at_time_s", &IslandEvent::at_time_s, at_least(0)),
      record("duration_s", &IslandEvent::duration_s, above(0)),
  };
  return table;
}

const std::vector<RecordField<NetworkLink>>& link_fields() {
  static const std::vector<RecordField<NetworkLink>> table = {
      record("between", &NetworkLink::between),
      record("latency_ms", &NetworkLink::latency_ms, at_least(0)),
      record("bandwidth_mbps", &NetworkLink::bandwidth_mbps, above(0)),
      record("jitter_ms", &NetworkLink::jitter_ms, at_least(0)),
      record("loss", &NetworkLink::loss, closed_open(0, 1)),
  };
  return table;
}

const std::vector<Section>& sections() {
  static const std::vector<Section> table = build();
  return table;
}

const Section* find_section(std::string_view name) {
  for (const auto& s : sections())
    if (s.name == name) return &s;
  return nullptr;
}

const Field* find_field(const Section& section, std::string_view name) {
  for (const auto& f : section.fields)
    if (f.name == name) return &f;
  return nullptr;
}

std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
  // Optimal-string-alignment distance: Levenshtein plus adjacent transpositions, so that
  // "modle" is one edit from "model".
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    return d[a.size()][b.size()];
  };
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::optional<int64_t> parse_int(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_uint(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+' || text[0] == '-') return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view text) {
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty() || text[0] == '+') return std::nullopt;
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v,
                                   std::chars_format::general);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest exact round-trip
  std::string s(buf, ec == std::errc() ? end : buf);
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace atl::config::schema
