// DeMo (docs/algorithms.md §4): the golden test against the authors' reference implementation
// (tests/algorithms/demo_reference.json, written by bloc97/DeMo demo.py with three gloo
// ranks), the DCT basis against the cosine formula, the divisor rule, the index codec, and
// §9 oracles 16 and 19 through the in-process group.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/demo.h"
#include "compression/dct.h"
#include "transport/inproc/inproc_group.h"
#include "transport/inproc/scheduler.h"

namespace atl::algorithms {
namespace {

// ---- a minimal JSON reader (objects, arrays, numbers, strings), enough for the oracle ----
struct Json {
  enum Kind { kNull, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  const Json& operator[](const std::string& k) const {
    auto it = fields.find(k);
    if (it == fields.end()) throw std::runtime_error("json: no key " + k);
    return it->second;
  }
  const Json& operator[](size_t i) const { return items.at(i); }
  std::vector<float> floats() const {
    std::vector<float> out;
    for (const auto& v : items) out.push_back(static_cast<float>(v.number));
    return out;
  }
};

class JsonParser {
 public:
  explicit JsonParser(std::string s) : s_(std::move(s)) {}
  Json parse() {
    Json v = value();
    space();
    if (i_ != s_.size()) throw std::runtime_error("json: trailing bytes");
    return v;
  }

 private:
  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  std::string string() {
    ++i_;  // "
    std::string out;
    while (s_.at(i_) != '"') out += s_[i_++];
    ++i_;
    return out;
  }
  Json value() {
    space();
    Json v;
    const char c = s_.at(i_);
    if (c == '{') {
      v.kind = Json::kObject;
      ++i_;
      space();
      while (s_.at(i_) != '}') {
        space();
        std::string k = string();
        space();
        ++i_;  // :
        v.fields[k] = value();
        space();
        if (s_.at(i_) == ',') ++i_;
        space();
      }
      ++i_;
    } else if (c == '[') {
      v.kind = Json::kArray;
      ++i_;
      space();
      while (s_.at(i_) != ']') {
        v.items.push_back(value());
        space();
        if (s_.at(i_) == ',') ++i_;
        space();
      }
      ++i_;
    } else if (c == '"') {
      v.kind = Json::kString;
      v.text = string();
    } else {
      v.kind = Json::kNumber;
      char* end = nullptr;
      v.number = std::strtod(s_.c_str() + i_, &end);
      if (end == s_.c_str() + i_) throw std::runtime_error("json: bad value");
      i_ = static_cast<size_t>(end - s_.c_str());
    }
    return v;
  }
  std::string s_;
  size_t i_ = 0;
};

Json load_reference() {
  std::ifstream in("tests/algorithms/demo_reference.json");
  if (!in) throw std::runtime_error("tests/algorithms/demo_reference.json not found (run from the repo root)");
  std::stringstream ss;
  ss << in.rdbuf();
  return JsonParser(ss.str()).parse();
}

at::Tensor tensor(const std::vector<float>& v) { return at::tensor(at::ArrayRef<float>(v), at::kFloat); }

// ---- the golden test ----

// The reference's four tensors (w1 8x12, b1 12, w2 6x10, b2 5; chunk 4, topk 4) exercise
// every case of the divisor rule: 8 -> 4 and 12 -> 4 (blocks 4x4, 4 of 16 kept), 12 -> 4
// (1-D chunks of 4, all 4 kept: δ ~ 0), 6 -> 3 and 10 -> 2 (blocks 3x2, 4 of 6 kept) and
// 5 -> 1 (chunks of one: everything is sent, δ = 0 exactly). Three islands feed the
// reference's gradients through the island-loop hook DeMo uses (inner_step) for four steps.
//
// Tolerances. Parameters: none, bit for bit. Every step multiplies by (1 - lr wd) and adds
// -lr * sign(u) with the same float32 operations as the reference (torch's mul_ by a scalar,
// add_ with alpha), and -lr * (+-1) is exact, so once every sign agrees nothing is left to
// round differently (measured: identical; a wrong sign would be off by 2 lr = 0.02).
// Residuals: 1e-7 absolute. They pass through the DCT, whose basis the reference takes from
// an FFT of the identity in float32 while atoll computes it in double and rounds it once, and
// the matrix products sum in another order; δ is O(1e-2), so differences of a few float32
// ulps (measured: at most 9.3e-9) are expected, while any algorithmic difference (a
// coefficient kept or dropped, a wrong mean) moves δ by ~1e-3.
TEST(Demo, MatchesTheAuthorsReferenceImplementation) {
  const Json ref = load_reference();
  const Json& hp = ref["hyperparameters"];
  const int w = static_cast<int>(ref["world"].number);
  ASSERT_EQ(w, 3);
  std::vector<std::string> names;
  for (const auto& n : ref["param_order"].items) names.push_back(n.text);
  ASSERT_EQ(names.size(), 4u);

  std::vector<ParamRange> layout;
  std::vector<float> theta0;
  int64_t offset = 0;
  for (const auto& n : names) {
    ParamRange r;
    r.offset = offset;
    for (const auto& d : ref["shapes"][n].items) r.shape.push_back(static_cast<int64_t>(d.number));
    const auto init = ref["initial_params"][n].floats();
    r.numel = static_cast<int64_t>(init.size());
    theta0.insert(theta0.end(), init.begin(), init.end());
    offset += r.numel;
    layout.push_back(r);
  }
  const int64_t n = offset;
  const auto& steps = ref["steps"].items;
  ASSERT_EQ(steps.size(), 4u);

  AlgorithmOptions o = AlgorithmOptions::of(DemoOptions{});
  o.islands = w;
  o.get<DemoOptions>().topk = static_cast<int64_t>(hp["compression_topk"].number);
  o.get<DemoOptions>().chunk = static_cast<int64_t>(hp["compression_chunk"].number);
  o.get<DemoOptions>().decay = hp["compression_decay"].number;
  o.weight_decay = hp["weight_decay"].number;
  const double lr = hp["lr"].number;

  // grads[step][island] = the flat gradient that rank set before that step
  auto flat = [&](const Json& by_name) {
    std::vector<float> v;
    for (const auto& nm : names) {
      auto part = by_name[nm].floats();
      v.insert(v.end(), part.begin(), part.end());
    }
    return tensor(v);
  };

  transport::Scheduler scheduler(w);
  transport::InprocHub hub(w, scheduler);
  std::vector<std::unique_ptr<transport::Group>> groups;
  for (int i = 0; i < w; ++i) groups.push_back(hub.make_group(i));
  const compression::Pipeline raw;
  // params_after[step][island], delta_after[step][island], bytes sent per step
  std::vector<std::vector<at::Tensor>> params_after(steps.size(), std::vector<at::Tensor>(w));
  std::vector<std::vector<at::Tensor>> delta_after(steps.size(), std::vector<at::Tensor>(w));
  std::vector<std::vector<RoundInfo>> rounds(w);
  scheduler.run([&](int i) {
    at::Tensor params = tensor(theta0);
    at::Tensor grads = at::zeros_like(params);
    demo::Demo algo(o);
    IslandContext ctx;
    ctx.island = i;
    ctx.params = params;
    ctx.grads = grads;
    ctx.group = groups[i].get();
    ctx.codec = &raw;
    ctx.layout = layout;
    ctx.on_round = [&rounds, i](const RoundInfo& r) { rounds[i].push_back(r); };
    algo.setup(ctx);
    for (size_t s = 0; s < steps.size(); ++s) {
      grads.copy_(flat(steps[s]["grads_by_rank"][static_cast<size_t>(i)]));
      ctx.lr = lr;
      algo.inner_step(ctx, static_cast<int64_t>(s) + 1);
      params_after[s][i] = params.clone();
      delta_after[s][i] = algo.residual().clone();
    }
  });

  for (size_t s = 0; s < steps.size(); ++s) {
    const at::Tensor want = flat(steps[s]["params_after"]);
    for (int i = 0; i < w; ++i) {
      EXPECT_TRUE(at::equal(params_after[s][i], params_after[s][0])) << "replicas differ, step " << s + 1;
      EXPECT_TRUE(at::equal(params_after[s][i], want))
          << "parameters, step " << s + 1 << " island " << i << ": max error "
          << (params_after[s][i] - want).abs().max().item<double>();
      const at::Tensor want_delta = flat(steps[s]["delta_after_by_rank"][static_cast<size_t>(i)]);
      const double derr = (delta_after[s][i] - want_delta).abs().max().item<double>();
      EXPECT_LT(derr, 1e-7) << "residual, step " << s + 1 << " island " << i;
    }
    // The parameters moved (the comparison is not vacuous): by lr (1 - ...) per element.
    const at::Tensor before = s == 0 ? tensor(theta0) : flat(steps[s - 1]["params_after"]);
    EXPECT_GT((want - before).abs().min().item<double>(), 0.5 * lr);
  }
  // The last tensor (5 elements, chunks of one) sends everything: its residual is exactly 0.
  const ParamRange& b2 = layout[3];
  EXPECT_TRUE(at::equal(delta_after[3][1].narrow(0, b2.offset, b2.numel), at::zeros({b2.numel})));

  // Bytes: the reference sent 81 (int64 index, fp32 value) pairs = 972 bytes per rank and
  // step; atoll sends the same 81 values (324 bytes) and 24*4 + 12*2 + 40*3 + 5*0 bits of
  // indices (30 bytes) per peer, plus the transport's framing.
  const auto plans = demo::plan(layout, n, o.get<DemoOptions>().chunk, o.get<DemoOptions>().topk);
  int64_t coefficients = 0;
  for (const auto& p : plans) coefficients += p.sent();
  EXPECT_EQ(coefficients * 12, static_cast<int64_t>(steps[0]["bytes_sent_by_rank"].number));
  EXPECT_EQ(demo::packed_index_bytes(plans), 30u);
  for (int i = 0; i < w; ++i) {
    ASSERT_EQ(rounds[i].size(), steps.size());
    for (const auto& r : rounds[i]) {
      EXPECT_EQ(r.contributors, w);
      EXPECT_GE(r.bytes_sent, static_cast<uint64_t>((w - 1) * (30 + 81 * 4)));  // to each peer
      EXPECT_LT(r.bytes_sent, static_cast<uint64_t>((w - 1) * (30 + 81 * 4 + 200)));
    }
  }
}

// ---- pieces ----

// The basis atoll uses against C_n[f, j] = sqrt(2/n) c_f cos(pi (2j+1) f / (2n)) evaluated
// here in double, and orthonormality (§9 oracle 14).
TEST(Demo, DctBasisIsTheOrthonormalDctIIByTheCosineFormula) {
  for (int64_t n : {1, 2, 3, 4, 6, 48, 64}) {
    const float* c = compression::dct_matrix(n);
    for (int64_t f = 0; f < n; ++f) {
      for (int64_t j = 0; j < n; ++j) {
        const double cf = f == 0 ? 1.0 / std::sqrt(2.0) : 1.0;
        const double want = std::sqrt(2.0 / static_cast<double>(n)) * cf *
                            std::cos(M_PI * static_cast<double>(2 * j + 1) * static_cast<double>(f) /
                                     (2.0 * static_cast<double>(n)));
        ASSERT_NEAR(c[f * n + j], want, 1e-7) << "n " << n << " f " << f << " j " << j;
      }
    }
    at::Tensor m = at::from_blob(const_cast<float*>(c), {n, n}, at::kFloat).to(at::kDouble);
    EXPECT_TRUE(at::allclose(at::matmul(m, m.t()), at::eye(n, at::kDouble), 0, 1e-6)) << n;
  }
}

// A 2-D block transform equals C1 X C2^T computed directly from the formula, and inverse()
// undoes forward().
TEST(Demo, BlockTransformIsSeparableDctAndRoundTrips) {
  std::vector<ParamRange> layout = {{0, 8 * 12, -1, {8, 12}, 0}, {96, 10, -1, {10}, 0}};
  const auto plans = demo::plan(layout, 106, 4, 3);
  at::manual_seed(3);
  const at::Tensor x = at::randn({106});
  at::Tensor y = at::empty({106}), back = at::empty({106});
  for (const auto& p : plans) {
    at::Tensor yp = y.narrow(0, p.offset, p.numel()), bp = back.narrow(0, p.offset, p.numel());
    demo::forward(p, x.narrow(0, p.offset, p.numel()), yp);
    demo::inverse(p, yp, bp);
  }
  EXPECT_TRUE(at::allclose(back, x, 0, 1e-5));
  // Block (row-block 1, col-block 2) of w [8, 12]: rows 4..7, cols 8..11; its 16 coefficients
  // are the 7th block (1 * 3 + 2 = 5th, zero-based) in the coefficient layout.
  auto cos_matrix = [](int64_t n) {
    at::Tensor m = at::empty({n, n}, at::kDouble);
    for (int64_t f = 0; f < n; ++f)
      for (int64_t j = 0; j < n; ++j)
        m[f][j] = std::sqrt(2.0 / n) * (f == 0 ? 1 / std::sqrt(2.0) : 1.0) * std::cos(M_PI * (2 * j + 1) * f / (2.0 * n));
    return m;
  };
  const at::Tensor c4 = cos_matrix(4);
  const at::Tensor block = x.narrow(0, 0, 96).view({8, 12}).slice(0, 4, 8).slice(1, 8, 12).to(at::kDouble);
  const at::Tensor want = at::matmul(at::matmul(c4, block), c4.t()).reshape({16});
  EXPECT_TRUE(at::allclose(y.narrow(0, 5 * 16, 16).to(at::kDouble), want, 0, 1e-5));
  // 1-D: chunks of sc(10, 4) = 2
  const at::Tensor c2 = cos_matrix(2);
  const at::Tensor chunk = x.narrow(0, 96 + 6, 2).to(at::kDouble);
  EXPECT_TRUE(at::allclose(y.narrow(0, 96 + 6, 2).to(at::kDouble), at::matmul(c2, chunk), 0, 1e-6));
}

// §9 oracle 15 and the reference's _get_smaller_split: the largest divisor <= s.
TEST(Demo, DivisorRule) {
  EXPECT_EQ(compression::dct_divisor_chunk(2048, 64), 64);
  EXPECT_EQ(compression::dct_divisor_chunk(896, 64), 64);
  EXPECT_EQ(compression::dct_divisor_chunk(96, 64), 48);
  EXPECT_EQ(compression::dct_divisor_chunk(127, 64), 1);  // a prime
  EXPECT_EQ(compression::dct_divisor_chunk(12, 64), 12);  // smaller than s: whole
  EXPECT_EQ(compression::dct_divisor_chunk(6, 4), 3);
  EXPECT_EQ(compression::dct_divisor_chunk(10, 4), 2);
  EXPECT_EQ(compression::dct_divisor_chunk(5, 4), 1);
  const auto plans = demo::plan({{0, 60, -1, {6, 10}, 0}, {60, 5, -1, {5}, 0}, {65, 24, -1, {2, 3, 4}, 0}}, 89, 4, 4);
  EXPECT_EQ(plans[0].n1, 3);
  EXPECT_EQ(plans[0].n2, 2);
  EXPECT_EQ(plans[0].blocks, 10);
  EXPECT_EQ(plans[0].k, 4);
  EXPECT_EQ(plans[0].bits, 3);
  EXPECT_EQ(plans[1].n2, 1);
  EXPECT_EQ(plans[1].k, 1);  // clamped to the block
  EXPECT_EQ(plans[1].bits, 0);
  EXPECT_EQ(plans[2].rows, 2);  // [2, 3, 4] read as [2, 12]
  EXPECT_EQ(plans[2].cols, 12);
  EXPECT_EQ(plans[2].n1, 2);
  EXPECT_EQ(plans[2].n2, 4);
}

// The parts of a sharded exchange (docs/ranks.md "The outer exchange, sharded"): consecutive
// whole tensors covering every plan once, in order, each part at least one tensor, the values
// they send about equal (within the largest tensor's), their first values where the earlier
// parts' end; one part of every plan with one shard or fewer tensors than shards.
TEST(Demo, PlanPartsAreConsecutiveWholeTensorsOfAboutEqualValues) {
  std::vector<ParamRange> layout;
  int64_t at = 0;
  for (int64_t rows : {40, 8, 8, 64, 8, 8, 64, 4, 16}) {
    layout.push_back({at, rows * 16, -1, {rows, 16}, 0});
    at += rows * 16;
  }
  const auto plans = demo::plan(layout, at, 4, 4);
  int64_t total = 0, largest = 0;
  for (const auto& p : plans) {
    total += p.sent();
    largest = std::max(largest, p.sent());
  }
  for (int shards : {1, 2, 3, 4, 9}) {
    SCOPED_TRACE(shards);
    const auto parts = demo::plan_parts(plans, shards);
    ASSERT_EQ(parts.size(), static_cast<size_t>(shards));
    size_t next = 0;
    int64_t first = 0;
    for (const auto& q : parts) {
      ASSERT_FALSE(q.plans.empty());
      EXPECT_EQ(q.first_plan, next);
      EXPECT_EQ(q.first, first);
      int64_t values = 0;
      for (size_t i = 0; i < q.plans.size(); ++i) {
        EXPECT_EQ(q.plans[i].offset, plans[next + i].offset);
        values += q.plans[i].sent();
      }
      EXPECT_EQ(q.values, values);
      EXPECT_LE(std::abs(static_cast<double>(values) - static_cast<double>(total) / shards), static_cast<double>(largest));
      next += q.plans.size();
      first += values;
    }
    EXPECT_EQ(next, plans.size());
  }
  EXPECT_EQ(demo::plan_parts(plans, 10).size(), 1u);  // 9 tensors: not cut in 10
  EXPECT_EQ(demo::plan_parts(plans, 10)[0].plans.size(), plans.size());
}

// Index codec: round trip, exact size (12 bits per index for blocks of 4096), and rejection
// of out-of-block, unordered and padded-with-garbage input.
TEST(Demo, IndexCodec) {
  const auto plans = demo::plan({{0, 64 * 128, -1, {64, 128}, 0}, {8192, 6, -1, {6}, 0}}, 8198, 64, 32);
  ASSERT_EQ(plans[0].bits, 12);
  ASSERT_EQ(plans[0].sent(), 64);
  ASSERT_EQ(plans[1].bits, 3);
  const size_t bytes = demo::packed_index_bytes(plans);
  EXPECT_EQ(bytes, (64u * 12 + 6 * 3 + 7) / 8);
  std::vector<uint32_t> idx;
  at::manual_seed(5);
  for (int b = 0; b < 2; ++b) {
    at::Tensor pick = std::get<0>(std::get<1>(at::randn({4096}).topk(32)).sort());
    for (int i = 0; i < 32; ++i) idx.push_back(static_cast<uint32_t>(pick[i].item<int64_t>()));
  }
  idx[31] = 4095;  // the largest index of a block
  std::sort(idx.begin(), idx.begin() + 32);
  for (uint32_t i = 0; i < 6; ++i) idx.push_back(i);
  std::vector<uint8_t> out;
  demo::pack_indices(plans, idx.data(), out);
  ASSERT_EQ(out.size(), bytes);
  std::vector<uint32_t> back(idx.size());
  ASSERT_TRUE(demo::unpack_indices(plans, out.data(), out.size(), back.data()).is_ok());
  EXPECT_EQ(back, idx);
  // corruptions
  EXPECT_FALSE(demo::unpack_indices(plans, out.data(), out.size() - 1, back.data()).is_ok());
  std::vector<uint32_t> bad = idx;
  std::swap(bad[0], bad[1]);  // not ascending
  std::vector<uint8_t> o2;
  demo::pack_indices(plans, bad.data(), o2);
  EXPECT_FALSE(demo::unpack_indices(plans, o2.data(), o2.size(), back.data()).is_ok());
  bad = idx;
  bad[64 + 5] = 6;  // outside a block of 6 (fits in 3 bits)
  o2.clear();
  demo::pack_indices(plans, bad.data(), o2);
  EXPECT_FALSE(demo::unpack_indices(plans, o2.data(), o2.size(), back.data()).is_ok());
  o2 = out;
  o2.back() |= 0x80;  // 786 bits: the top bits of the last byte are padding
  EXPECT_FALSE(demo::unpack_indices(plans, o2.data(), o2.size(), back.data()).is_ok());
}

TEST(Demo, BlockTopkKeepsLargestMagnitudesTiesToLowerIndex) {
  const std::vector<float> x = {0.5f, -3.f, 2.f, -2.f, 0.f, 3.f, 1.f};
  uint32_t idx[3];
  demo::block_topk(x.data(), 7, 3, idx);
  EXPECT_EQ(std::vector<uint32_t>(idx, idx + 3), (std::vector<uint32_t>{1, 2, 5}));  // |-3|, |3|, then 2 before -2
}

// Runs `steps` DeMo steps on W islands with gradients grads[i] (fixed), returns island 0's
// parameter change and its residual.
struct Small {
  at::Tensor change, residual;
  std::vector<at::Tensor> params;
};
Small run_small(const AlgorithmOptions& o, const std::vector<at::Tensor>& grads, const std::vector<ParamRange>& layout,
                double lr, int steps, const compression::Pipeline& codec = compression::Pipeline()) {
  const int w = static_cast<int>(grads.size());
  transport::Scheduler scheduler(w);
  transport::InprocHub hub(w, scheduler);
  std::vector<std::unique_ptr<transport::Group>> groups;
  for (int i = 0; i < w; ++i) groups.push_back(hub.make_group(i));
  Small out;
  out.params.resize(w);
  const at::Tensor theta0 = at::zeros_like(grads[0]);
  scheduler.run([&](int i) {
    at::Tensor params = theta0.clone(), g = at::zeros_like(params);
    demo::Demo algo(o);
    IslandContext ctx;
    ctx.island = i;
    ctx.params = params;
    ctx.grads = g;
    ctx.group = groups[i].get();
    ctx.codec = &codec;
    ctx.layout = layout;
    algo.setup(ctx);
    for (int s = 1; s <= steps; ++s) {
      g.copy_(grads[i]);
      ctx.lr = lr;
      algo.inner_step(ctx, s);
    }
    out.params[i] = params.clone();
    if (i == 0) out.residual = algo.residual().clone();
  });
  out.change = out.params[0] - theta0;
  return out;
}

// §9 oracles 16/17: k = the whole block: the residual is ~0 and the update is
// -lr sign(mean_w g_w) (one island: plain signSGD).
TEST(Demo, FullBlockIsSignOfTheMeanGradient) {
  AlgorithmOptions o = AlgorithmOptions::of(DemoOptions{});
  o.get<DemoOptions>().chunk = 4;
  o.get<DemoOptions>().topk = 16;
  o.get<DemoOptions>().decay = 0.9;
  const std::vector<ParamRange> layout = {{0, 32, -1, {4, 8}, 0}, {32, 8, -1, {8}, 0}};
  at::manual_seed(11);
  std::vector<at::Tensor> g = {at::randn({40}), at::randn({40}), at::randn({40})};
  auto one = run_small(o, {g[0]}, layout, 0.1, 1);
  EXPECT_TRUE(at::allclose(one.change, -0.1 * g[0].sign(), 0, 1e-6));
  EXPECT_LT(one.residual.abs().max().item<double>(), 1e-6);
  auto three = run_small(o, g, layout, 0.1, 1);
  const at::Tensor mean = (g[0] + g[1] + g[2]) / 3;
  EXPECT_TRUE(at::allclose(three.change, -0.1 * mean.sign(), 0, 1e-6));
  EXPECT_TRUE(at::equal(three.params[0], three.params[2]));
}

// §9 oracle 19: a coefficient is the mean over the islands that sent it, not their sum nor a
// division by every island. One 1-D tensor of two values (one DCT chunk of 2), k = 1, lr = 1,
// decay 0, so island i sends the larger of its coefficients y = C2 g. Island 0 sends y0 = 2;
// islands 1 and 2 send y1 = 1.5. Means over senders: Q = (2, 1.5), so u1 = (Q0 - Q1)/√2 > 0;
// a sum gives Q = (2, 3) and a division by 3 gives (2/3, 1): u1 < 0 for both.
TEST(Demo, CoefficientMeanIsOverTheIslandsThatSentIt) {
  AlgorithmOptions o = AlgorithmOptions::of(DemoOptions{});
  o.get<DemoOptions>().chunk = 2;
  o.get<DemoOptions>().topk = 1;
  o.get<DemoOptions>().decay = 0;
  const float a = static_cast<float>(1 / std::sqrt(2.0));
  auto from_coefficients = [a](float y0, float y1) { return at::tensor({a * (y0 + y1), a * (y0 - y1)}); };
  std::vector<at::Tensor> g = {from_coefficients(2.f, 0.1f), from_coefficients(0.1f, 1.5f),
                               from_coefficients(0.1f, 1.5f)};
  auto r = run_small(o, g, {}, 1.0, 1);
  EXPECT_FLOAT_EQ(r.change[0].item<float>(), -1.f);
  EXPECT_FLOAT_EQ(r.change[1].item<float>(), -1.f);
  // Island 0's residual keeps the coefficient it did not send (0.1 on y1): δ = C2^T (0, 0.1).
  EXPECT_NEAR(r.residual[0].item<float>(), a * 0.1f, 1e-6);
  EXPECT_NEAR(r.residual[1].item<float>(), -a * 0.1f, 1e-6);
}

// Values through a lossy codec (compression: [fp16]): every island uses the values as
// decoded, for its own q and for the means, so the quantisation error stays in the residual.
// Chunks of one (C_1 = [1]), k = 1, lr 1, decay 0: the coefficient is g itself, so
// δ_after = g - fp16(g) exactly and the step is -sign(fp16(g)).
TEST(Demo, LossyValuesLeaveTheirQuantisationErrorInTheResidual) {
  AlgorithmOptions o = AlgorithmOptions::of(DemoOptions{});
  o.get<DemoOptions>().chunk = 1;
  o.get<DemoOptions>().topk = 1;
  o.get<DemoOptions>().decay = 0;
  compression::StageConfig fp16;
  fp16.id = compression::StageId::kFp16;
  auto codec = compression::Pipeline::make({fp16});
  ASSERT_TRUE(codec.is_ok());
  at::manual_seed(2);
  const at::Tensor g = at::randn({64}) * 1e-3;
  const at::Tensor decoded = g.to(at::kHalf).to(at::kFloat);
  ASSERT_FALSE(at::equal(decoded, g));  // fp16 does lose something here
  auto r = run_small(o, {g}, {}, 1.0, 1, codec.value());
  EXPECT_TRUE(at::equal(r.residual, g - decoded));
  EXPECT_TRUE(at::equal(r.change, -decoded.sign()));
}

// A transform or sparsify stage cannot carry DeMo's values (it does its own DCT and top-k);
// quantize and zstd stages can.
TEST(Demo, RefusesTransformAndSparsifyStages) {
  compression::StageConfig topk;
  topk.id = compression::StageId::kTopK;
  topk.fraction = 0.1;
  compression::StageConfig int8;
  int8.id = compression::StageId::kInt8;
  compression::StageConfig zstd;
  zstd.id = compression::StageId::kZstd;
  EXPECT_TRUE(codec_problem("demo", compression::Pipeline::make({topk}).value().stages()));
  EXPECT_FALSE(codec_problem("demo", compression::Pipeline::make({int8, zstd}).value().stages()));
  EXPECT_FALSE(codec_problem("demo", compression::Pipeline().stages()));
  AlgorithmOptions o = AlgorithmOptions::of(DemoOptions{});
  demo::Demo algo(o);
  IslandContext ctx;
  ctx.params = at::zeros({8});
  ctx.grads = at::zeros({8});
  const compression::Pipeline bad = compression::Pipeline::make({topk}).value();
  ctx.codec = &bad;
  EXPECT_THROW(algo.setup(ctx), UserError);
}

}  // namespace
}  // namespace atl::algorithms
