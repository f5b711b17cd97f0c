#include "compression/chain.h"

#include <bit>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "compression/stage_ops.h"

namespace atl::compression {

bool is_known_stage(uint8_t raw_id) { return find_stage_info(static_cast<StageId>(raw_id)) != nullptr; }

Slot slot_of(StageId id) {
  if (const StageInfo* s = find_stage_info(id)) return s->slot;
  throw std::invalid_argument("unknown stage id " + std::to_string(static_cast<int>(id)));
}

const char* slot_name(Slot slot) {
  switch (slot) {
    case Slot::kTransform: return "transform";
    case Slot::kSparsify: return "sparsify";
    case Slot::kQuantize: return "quantize";
    case Slot::kLossless: return "lossless";
  }
  return "unknown";
}

const StageConfig* Chain::slot(Slot s) const {
  for (int i = 0; i < size; ++i) {
    if (slot_of(stages[i].id) == s) return &stages[i];
  }
  return nullptr;
}

bool same_stage(const StageConfig& x, const StageConfig& y) {
  return x.id == y.id && x.block == y.block && x.rounding == y.rounding &&
         std::bit_cast<uint64_t>(x.fraction) == std::bit_cast<uint64_t>(y.fraction) &&  // -0.0 != 0.0
         x.count == y.count && x.chunk == y.chunk &&
         x.level == y.level;
}

bool operator==(const Chain& a, const Chain& b) {
  if (a.size != b.size) return false;
  for (int i = 0; i < a.size; ++i) {
    if (!same_stage(a.stages[i], b.stages[i])) return false;
  }
  return true;
}

bool operator!=(const Chain& a, const Chain& b) { return !(a == b); }

namespace {

std::string stage_label(size_t i, StageId id) {
  return "stage " + std::to_string(i + 1) + " '" + stage_name(id) + "'";
}

// Parameter ranges of one known stage, by the parameter families it reads; empty when fine.
std::string check_params(const StageConfig& st) {
  std::ostringstream why;
  const uint8_t p = stage_params(st.id);
  if ((p & kChunkParam) && (st.chunk < 1 || st.chunk > kMaxDctChunk)) {
    why << "chunk must be in [1, " << kMaxDctChunk << "], got " << st.chunk;
  } else if ((p & kKeepParams) && (st.count < 0 || st.count > kMaxElements)) {
    why << "count must be in [1, " << kMaxElements << "] (or 0 to use fraction), got " << st.count;
  } else if ((p & kKeepParams) && st.count == 0 && !(st.fraction > 0.0 && st.fraction <= 1.0)) {
    why << "fraction must be in (0, 1] when count is 0, got " << st.fraction;
  } else if ((p & kBlockParams) && (st.block < 1 || st.block > kMaxBlock)) {
    why << "block must be in [1, " << kMaxBlock << "], got " << st.block;
  } else if ((p & kBlockParams) && st.rounding != Rounding::kNearest && st.rounding != Rounding::kStochastic) {
    why << "unknown rounding " << static_cast<int>(st.rounding);
  } else if ((p & kLevelParam) && (st.level < kMinZstdLevel || st.level > kMaxZstdLevel)) {
    why << "level must be in [" << kMinZstdLevel << ", " << kMaxZstdLevel << "], got " << st.level;
  }
  return why.str();
}

}  // namespace

StageConfig canonical_stage(const StageConfig& st) {
  StageConfig c;
  c.id = st.id;
  const uint8_t p = stage_params(st.id);
  if (p & kChunkParam) c.chunk = st.chunk;
  if (p & kKeepParams) {
    c.count = st.count;
    c.fraction = st.count > 0 ? 0.0 : st.fraction;
  }
  if (p & kBlockParams) {
    c.block = st.block;
    c.rounding = st.rounding;
  }
  if (p & kLevelParam) c.level = st.level;
  return c;
}

Status validate_chain(const StageConfig* stages, size_t count) {
  if (count > static_cast<size_t>(kMaxStages)) {
    return invalid_argument("a pipeline has at most " + std::to_string(kMaxStages) +
                            " stages (one per slot), got " + std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    const StageId id = stages[i].id;
    if (!is_known_stage(static_cast<uint8_t>(id))) {
      return invalid_argument("stage " + std::to_string(i + 1) + " has unknown id " +
                              std::to_string(static_cast<int>(id)));
    }
    if (std::string why = check_params(stages[i]); !why.empty()) {
      return invalid_argument(stage_label(i, id) + ": " + why);
    }
    if (i == 0) continue;
    const StageId prev = stages[i - 1].id;
    if (slot_of(prev) == Slot::kLossless) {
      return invalid_argument(stage_label(i - 1, prev) + " must be last");
    }
    const Slot s = slot_of(id), p = slot_of(prev);
    if (s == p) {
      return invalid_argument(stage_label(i, id) + " and " + stage_label(i - 1, prev) +
                              " both fill the " + slot_name(s) + " slot; use at most one");
    }
    if (s < p) {
      return invalid_argument(stage_label(i, id) + " (" + slot_name(s) + ") must come before " +
                              stage_label(i - 1, prev) + " (" + slot_name(p) +
                              "); the order is transform < sparsify < quantize < lossless");
    }
  }
  return Status::ok();
}

StatusOr<Chain> make_chain(const std::vector<StageConfig>& stages) {
  if (Status st = validate_chain(stages.data(), stages.size()); !st.is_ok()) return st;
  Chain chain;
  for (const StageConfig& st : stages) chain.stages[chain.size++] = canonical_stage(st);
  return chain;
}

std::string describe_chain(const Chain& chain) {
  if (chain.empty()) return "fp32";
  std::ostringstream os;
  for (int i = 0; i < chain.size; ++i) {
    const StageConfig& st = chain.stages[i];
    if (i) os << '+';
    os << stage_name(st.id);
    const uint8_t p = stage_params(st.id);
    if (p & kChunkParam) os << "(chunk=" << st.chunk << ')';
    if ((p & kKeepParams) && st.count > 0) os << "(count=" << st.count << ')';
    if ((p & kKeepParams) && st.count <= 0) os << "(fraction=" << st.fraction << ')';
    if (p & kBlockParams) os << "(block=" << st.block << (st.rounding == Rounding::kStochastic ? ",stochastic" : "") << ')';
    if (p & kLevelParam) os << '(' << st.level << ')';
  }
  return os.str();
}

int64_t kept_count(const StageConfig& sparsify, int64_t n) {
  if (n <= 0) return 0;
  if (sparsify.count > 0) return std::min(sparsify.count, n);
  const double k = std::ceil(sparsify.fraction * static_cast<double>(n));
  if (!(k >= 1.0)) return 1;
  if (k >= static_cast<double>(n)) return n;
  return static_cast<int64_t>(k);
}

size_t value_bytes(const Chain& chain, int64_t m) {
  if (const StageConfig* q = chain.slot(Slot::kQuantize)) return stage_ops(q->id).value_bytes(m, *q);
  return static_cast<size_t>(m) * sizeof(float);
}

PayloadBounds payload_bounds(const Chain& chain, int64_t n) {
  PayloadBounds b;
  const StageConfig* sparse = chain.slot(Slot::kSparsify);
  b.values = sparse ? kept_count(*sparse, n) : n;
  const size_t vb = value_bytes(chain, b.values);
  const bool indexed = sparse && stage_ops(sparse->id).sends_indices;
  const size_t k = static_cast<size_t>(b.values);
  b.min_inner = vb + (indexed ? k : 0);
  b.max_inner = vb + (indexed ? k * kMaxVarintBytes : 0);
  if (const StageConfig* lossless = chain.slot(Slot::kLossless)) {
    b.min_payload = 1;
    b.max_payload = stage_ops(lossless->id).compress_bound(b.max_inner);
  } else {
    b.min_payload = b.min_inner;
    b.max_payload = b.max_inner;
  }
  return b;
}

}  // namespace atl::compression
