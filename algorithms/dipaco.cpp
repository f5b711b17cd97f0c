// DiPaCo's optimisation: DiLoCo per module (Douillard et al., arXiv 2403.10616;
// docs/dipaco.md "Optimisation").
//
// Each island trains one path of a modular model; its parameters are that path, and each
// parameter belongs to one module (ParamRange::module, filled from the path structure). Every
// H inner steps, for every module m on this island's path:
//   delta_m  = theta_g[m] - theta_i[m]                    (old minus new, this module's slices)
//   Delta_m  = sum_{i through m} w_i delta_m,i / sum w_i   (w_i = 1, or the island's shard size)
//              over a sub-group of exactly the islands whose path goes through m (key m + 1),
//              all modules' all-reduces in flight together;
//   Delta_m *= sqrt(P_m)   with norm rescaling (P_m = paths through m)
// then one outer step theta_g <- OuterOpt(theta_g, Delta) over the whole path (the outer
// optimizers are element-wise, so this is the per-module outer step), and theta_i <- theta_g.
// A module that only this island goes through (path-specific, or a path with one island) is
// not exchanged: its Delta is this island's own delta (no bytes), and the outer step still
// applies to it. A final sync happens at the last step when it is not a multiple of H.
// Lost islands: a module's average is over the sub-group's survivors (kPeerLost is usable).
// Compression: each module's delta travels through ctx.codec, with error feedback per module.
//
// Fewer islands than paths (options.path_modules has more paths P than options.islands I;
// docs/dipaco.md "Fewer islands than paths"): in round r island i trains path
// (i + r I) mod P, so every round trains I distinct paths and every path is trained equally
// often. Every island keeps every module's global parameters and its own outer optimizer per
// module. At the end of a round each module that some island trained is all-reduced over the
// whole group: an island that trained it sends w_i I / W_m times its delta (W_m: the summed
// weights of the islands that trained it this round), the others send zeros, so the plain
// mean is the weighted mean over the trainers (rescaled from the contributors when islands
// are lost; skipped when none of its trainers contributed). Every island then applies the
// module's outer step to its copy, so all copies stay bitwise equal; modules nobody trained
// keep their parameters and outer state. The island then loads its next path from the
// globals and calls ctx.switch_path (data of the new path, inner optimizer afresh).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "algorithms/builtin.h"
#include "algorithms/exchange.h"
#include "algorithms/outer_optimizer.h"

namespace atl::algorithms {

namespace {

class DiPaCo final : public Algorithm {
 public:
  explicit DiPaCo(const AlgorithmOptions& options)
      : options_(options), own_(options.get<DipacoOptions>()), outer_(own_.outer) {}

  std::string name() const override { return "dipaco"; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    anchor_ = ctx.params.detach().clone();
    delta_ = at::empty({ctx.params.numel()}, ctx.params.options().device(at::kCPU));
    outer_.place(nullptr, ctx.outer_shards);
    if (rotating()) {
      setup_tasks(ctx);
      return;
    }
    std::map<int, Module> by_id;
    if (ctx.layout.empty()) {
      by_id[0].ranges.push_back({0, ctx.params.numel()});
    } else {
      for (const ParamRange& r : ctx.layout) by_id[r.module].ranges.push_back({r.offset, r.numel});
    }
    for (auto& [id, m] : by_id) {
      m.id = id;
      m.what = "dipaco all-reduce of module " + std::to_string(id);
      for (const auto& [offset, numel] : m.ranges) m.numel += numel;
      const std::vector<int>& islands = islands_through(id);
      TORCH_CHECK(std::binary_search(islands.begin(), islands.end(), ctx.island), "dipaco: island ", ctx.island,
                  " holds module ", id, " but is not among the islands through it");
      if (islands.size() > 1) m.group = ctx.group->subgroup(static_cast<uint32_t>(id) + 1, islands);
      m.scale = options_.norm_rescale ? std::sqrt(static_cast<double>(paths_through(id))) : 1.0;
      m.buffer = at::empty({m.numel}, delta_.options());
      m.feedback = std::make_unique<Feedback>(own_.error_feedback);
      modules_.push_back(std::move(m));
    }
  }

  int64_t planned_steps(int64_t configured) override {
    last_step_ = configured;
    return configured;
  }

  void after_inner_step(IslandContext& ctx, int64_t step) override {
    step_ = step;
    if (step % own_.inner_steps != 0 && step != last_step_) return;
    if (rotating()) {
      sync_tasks(ctx, step);
      return;
    }
    at::NoGradGuard no_grad;
    const RoundMeter meter(*ctx.group);
    delta_.copy_(anchor_ - ctx.params);
    const double weight = own_.weight_by_shard ? static_cast<double>(ctx.shard_size) : 1.0;
    for (Module& m : modules_) {
      if (!m.group) continue;
      gather(m);
      at::Tensor transmitted = m.feedback->compensate(m.buffer, *ctx.codec);
      m.handle = m.group->allreduce_mean(m.buffer, *ctx.codec, weight, transmitted);
    }
    int contributors = 1;
    for (Module& m : modules_) {
      if (m.group) {
        const transport::CollectiveResult result = m.handle->wait();
        m.handle.reset();
        require_usable(result, ctx, m.what.c_str(), step);
        m.feedback->update();
        contributors = std::max(contributors, static_cast<int>(result.contributors.size()));
        scatter(m);
      }
      if (m.scale != 1.0) {
        for (const auto& [offset, numel] : m.ranges) delta_.narrow(0, offset, numel).mul_(m.scale);
      }
    }
    ++round_;
    if (ctx.on_round) ctx.on_round(meter.finish(*ctx.group, round_, step, contributors, delta_.norm().item<double>()));
    outer_.step(anchor_, delta_.device() == anchor_.device() ? delta_ : delta_.to(anchor_.device()));
    ctx.params.copy_(anchor_);
  }

  at::Tensor global_params() const override { return anchor_; }

  // Fewer islands than paths: the anchor's layout with path `path`'s modules' globals.
  at::Tensor path_global_params(int path) const override {
    if (!rotating() || modules_.empty()) return {};
    TORCH_CHECK(path >= 0 && path < paths(), "dipaco: no path ", path, " (", paths(), " paths)");
    at::NoGradGuard no_grad;
    at::Tensor out = at::empty_like(anchor_);
    for (const Module& m : modules_) {
      if (!path_through(path, m.id)) continue;
      int64_t at = 0;
      for (const auto& [offset, numel] : m.ranges) {
        out.narrow(0, offset, numel).copy_(m.global.narrow(0, at, numel));
        at += numel;
      }
    }
    return out;
  }

  // A joiner gets the outer optimizer's state and the round count (as DiLoCo's).
  AlgorithmState export_state() const override { return round_and_outer(state()); }

  void import_state(IslandContext&, const AlgorithmState& state) override {
    TORCH_CHECK(!rotating(), "dipaco: an island cannot join a run with fewer islands than paths");
    import_round_and_outer(state, round_, outer_, anchor_.device());
  }

  // Checkpoint (docs/checkpoints.md): "round", "anchor", the outer optimizer's "outer.*",
  // then each module's error-feedback residual "module.<id>.residual" in ascending module id
  // (undefined until a lossy round; always undefined for a module only this island goes
  // through). Every module's exchange completes within the sync step, so any step boundary
  // may hold a checkpoint.
  AlgorithmCheckpoint state() const override {
    if (rotating()) return tasks_state();
    AlgorithmCheckpoint s = anchor_and_outer(round_, anchor_, outer_);
    for (const Module& m : modules_) s.add(module_name(m, "residual"), m.feedback->residual());
    return s;
  }
  void load(IslandContext& ctx, const AlgorithmCheckpoint& state) override {
    if (rotating()) {
      load_tasks(ctx, state);
      return;
    }
    for (const Module& m : modules_) state.tensor(module_name(m, "residual"));  // all there before any change
    load_anchor_and_outer(state, round_, anchor_, outer_);
    for (Module& m : modules_) m.feedback->load(state.tensor(module_name(m, "residual")));
  }

 private:
  struct Module;
  static std::string module_name(const Module& m, const char* what) {
    return "module." + std::to_string(m.id) + "." + what;
  }
  struct Module {
    int id = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, numel) in the flat buffer
    int64_t numel = 0;
    std::string what;                                 // "dipaco all-reduce of module 3"
    double scale = 1.0;                               // norm rescaling factor
    std::unique_ptr<transport::Group> group;          // null: only this island goes through it
    at::Tensor buffer;                                // [numel] CPU: delta_m, then Delta_m
    std::unique_ptr<Feedback> feedback;
    std::unique_ptr<transport::Handle> handle;
    // Fewer islands than paths: this module's global parameters [numel] (on the parameters'
    // device) and its outer optimizer; whether this island's current path goes through it.
    at::Tensor global;
    std::unique_ptr<OuterOptimizer> outer;
    bool on_path = false;
  };

  const std::vector<int>& islands_through(int module) const {
    TORCH_CHECK(module >= 0 && module < static_cast<int>(options_.module_islands.size()),
                "dipaco: no islands listed for module ", module);
    return options_.module_islands[module];
  }
  int paths_through(int module) const {
    return module < static_cast<int>(options_.module_paths.size()) ? options_.module_paths[module] : 1;
  }

  void gather(Module& m) {
    int64_t at = 0;
    for (const auto& [offset, numel] : m.ranges) {
      m.buffer.narrow(0, at, numel).copy_(delta_.narrow(0, offset, numel));
      at += numel;
    }
  }
  void scatter(Module& m) {
    int64_t at = 0;
    for (const auto& [offset, numel] : m.ranges) {
      delta_.narrow(0, offset, numel).copy_(m.buffer.narrow(0, at, numel));
      at += numel;
    }
  }

  // ---- Fewer islands than paths (docs/dipaco.md "Fewer islands than paths") ----

  int paths() const { return static_cast<int>(options_.path_modules.size()); }
  bool rotating() const { return paths() > options_.islands; }
  // The path island `island` trains in round `round` (0-based).
  int path_of(int island, int64_t round) const {
    return static_cast<int>((island + (round % paths()) * options_.islands) % paths());
  }
  // The island that trains `path` in round `round`, or -1 when no island does.
  int island_of(int path, int64_t round) const {
    const int64_t P = paths();
    const int64_t i = ((path - (round % P) * options_.islands) % P + P) % P;
    return i < options_.islands ? static_cast<int>(i) : -1;
  }
  // Examples of `path`'s shard consumed before round `round`: H x batch per round it was
  // trained in (only the last round may be shorter, and nothing follows it).
  int64_t examples_before(int path, int64_t round) const {
    int64_t rounds = 0;
    for (int64_t r = 0; r < round; ++r) rounds += island_of(path, r) >= 0 ? 1 : 0;
    return rounds * own_.inner_steps * options_.batch_size;
  }
  // Island `island`'s weight in the modules it trains in round `round`: its path's shard size
  // (ctx.path_shard_sizes, else the options').
  double task_weight(const IslandContext& ctx, int island, int64_t round) const {
    if (!own_.weight_by_shard) return 1.0;
    const int path = path_of(island, round);
    const std::vector<int64_t>& sizes = ctx.path_shard_sizes ? *ctx.path_shard_sizes : options_.shard_sizes;
    return path < static_cast<int>(sizes.size()) ? static_cast<double>(sizes[path]) : 1.0;
  }
  bool path_through(int path, int module) const {
    const std::vector<int>& mods = path_mods_.at(static_cast<size_t>(path));
    return std::binary_search(mods.begin(), mods.end(), module);
  }

  // Every module's ranges (the same on every path through it: paths share one layout), its
  // global copy (the initial parameters: every path starts from the base model) and outer
  // optimizer; the path of round 0.
  void setup_tasks(IslandContext& ctx) {
    std::vector<ParamRange> layout = ctx.layout;
    if (layout.empty()) layout.push_back({0, ctx.params.numel(), -1, {}, 0});
    std::map<int, std::map<int64_t, int64_t>> ranges;  // module -> offset -> numel
    path_mods_.assign(static_cast<size_t>(paths()), {});
    for (int p = 0; p < paths(); ++p) {
      const std::vector<int>& of_block = options_.path_modules[static_cast<size_t>(p)];
      for (const ParamRange& r : layout) {
        TORCH_CHECK(r.block + 1 >= 0 && r.block + 1 < static_cast<int>(of_block.size()), "dipaco: no module for block ",
                    r.block, " on path ", p);
        const int id = of_block[static_cast<size_t>(r.block + 1)];
        ranges[id][r.offset] = r.numel;
        std::vector<int>& mods = path_mods_[static_cast<size_t>(p)];
        if (std::find(mods.begin(), mods.end(), id) == mods.end()) mods.push_back(id);
      }
      std::sort(path_mods_[static_cast<size_t>(p)].begin(), path_mods_[static_cast<size_t>(p)].end());
    }
    for (auto& [id, by_offset] : ranges) {
      Module m;
      m.id = id;
      m.what = "dipaco all-reduce of module " + std::to_string(id);
      for (const auto& [offset, numel] : by_offset) {
        m.ranges.push_back({offset, numel});
        m.numel += numel;
      }
      m.scale = options_.norm_rescale ? std::sqrt(static_cast<double>(paths_through(id))) : 1.0;
      m.buffer = at::empty({m.numel}, delta_.options());
      m.feedback = std::make_unique<Feedback>(own_.error_feedback);
      m.global = at::empty({m.numel}, ctx.params.options());
      int64_t at = 0;
      for (const auto& [offset, numel] : m.ranges) {
        m.global.narrow(0, at, numel).copy_(ctx.params.narrow(0, offset, numel));
        at += numel;
      }
      m.outer = std::make_unique<OuterOptimizer>(own_.outer);
      m.outer->place(nullptr, ctx.outer_shards);
      modules_.push_back(std::move(m));
    }
    take_path(ctx, path_of(ctx.island, 0));
  }

  // This island now trains `path`: the anchor and the parameters are its modules' globals.
  void take_path(IslandContext& ctx, int path) {
    for (Module& m : modules_) {
      m.on_path = path_through(path, m.id);
      if (!m.on_path) continue;
      int64_t at = 0;
      for (const auto& [offset, numel] : m.ranges) {
        anchor_.narrow(0, offset, numel).copy_(m.global.narrow(0, at, numel));
        at += numel;
      }
    }
    ctx.params.copy_(anchor_);
    ctx.path = path;
  }

  void sync_tasks(IslandContext& ctx, int64_t step) {
    at::NoGradGuard no_grad;
    const RoundMeter meter(*ctx.group);
    const int islands = options_.islands;
    delta_.copy_(anchor_ - ctx.params);
    // The summed weights of the islands that train each module this round.
    std::map<int, double> trained;  // module -> W_m
    for (int j = 0; j < islands; ++j) {
      for (int id : path_mods_[static_cast<size_t>(path_of(j, round_))]) trained[id] += task_weight(ctx, j, round_);
    }
    const double weight = task_weight(ctx, ctx.island, round_);
    for (Module& m : modules_) {
      const auto it = trained.find(m.id);
      if (it == trained.end()) continue;
      if (!m.on_path) {
        m.buffer.zero_();
        if (islands > 1) m.handle = ctx.group->allreduce_mean(m.buffer, *ctx.codec);
        continue;
      }
      gather(m);
      if (islands == 1) continue;
      m.buffer.mul_(weight * islands / it->second);
      at::Tensor transmitted = m.feedback->compensate(m.buffer, *ctx.codec);
      m.handle = ctx.group->allreduce_mean(m.buffer, *ctx.codec, 1.0, transmitted);
    }
    int contributors = 1;
    for (Module& m : modules_) {
      const auto it = trained.find(m.id);
      if (it == trained.end()) continue;
      if (islands > 1) {
        const transport::CollectiveResult result = m.handle->wait();
        m.handle.reset();
        require_usable(result, ctx, m.what.c_str(), step);
        if (m.on_path) m.feedback->update();
        contributors = std::max(contributors, static_cast<int>(result.contributors.size()));
        // Islands lost: the mean is over the contributors, and over the weights of the
        // trainers among them.
        double kept = 0;
        for (int j : result.contributors) {
          if (path_through(path_of(j, round_), m.id)) kept += task_weight(ctx, j, round_);
        }
        if (kept == 0) continue;  // none of its trainers made it: the module stays as it is
        const double fix = static_cast<double>(result.contributors.size()) / islands * it->second / kept;
        if (fix != 1.0) m.buffer.mul_(fix);
      }
      if (m.scale != 1.0) m.buffer.mul_(m.scale);
      if (m.on_path) scatter(m);
      m.outer->step(m.global, m.buffer.device() == m.global.device() ? m.buffer : m.buffer.to(m.global.device()));
    }
    ++round_;
    double norm = 0;
    for (const Module& m : modules_) {
      if (!m.on_path) continue;
      for (const auto& [offset, numel] : m.ranges) norm += delta_.narrow(0, offset, numel).pow(2).sum().item<double>();
    }
    if (ctx.on_round) ctx.on_round(meter.finish(*ctx.group, round_, step, contributors, std::sqrt(norm)));
    if (step == last_step_) {
      take_path(ctx, ctx.path);  // the last path's updated modules: the model this island reports
      return;
    }
    const int next = path_of(ctx.island, round_);
    take_path(ctx, next);
    if (ctx.switch_path) ctx.switch_path(next, examples_before(next, round_), true);
  }

  // Checkpoint with fewer islands than paths: "round", "step", "anchor", then per module in
  // ascending id "module.<id>.residual" (error feedback), "module.<id>.global" and its outer
  // optimizer's "module.<id>.outer.*".
  AlgorithmCheckpoint tasks_state() const {
    AlgorithmCheckpoint s;
    s.add("round", round_).add("step", step_).add("anchor", anchor_);
    for (const Module& m : modules_) {
      s.add(module_name(m, "residual"), m.feedback->residual()).add(module_name(m, "global"), m.global);
      m.outer->save(s, module_name(m, "outer"));
    }
    return s;
  }
  void load_tasks(IslandContext& ctx, const AlgorithmCheckpoint& s) {
    at::NoGradGuard no_grad;
    const int64_t round = s.integer("round"), step = s.integer("step");
    for (Module& m : modules_) {  // every entry read before the state changes
      s.tensor(module_name(m, "residual"));
      TORCH_CHECK(s.tensor(module_name(m, "global")).numel() == m.global.numel(), "dipaco checkpoint: module ", m.id,
                  "'s global model has another size");
      m.outer->load(s, module_name(m, "outer"), m.global.device());
    }
    round_ = round;
    step_ = step;
    anchor_.copy_(s.tensor("anchor"));
    for (Module& m : modules_) {
      m.feedback->load(s.tensor(module_name(m, "residual")));
      m.global.copy_(s.tensor(module_name(m, "global")));
    }
    // The path of the round in progress, its data after the steps of this round already run;
    // the parameters and the inner optimizer are the checkpoint's (restored by the runtime).
    const int path = path_of(ctx.island, round_);
    for (Module& m : modules_) m.on_path = path_through(path, m.id);
    ctx.path = path;
    const int64_t done = step_ - round_ * own_.inner_steps;
    if (ctx.switch_path) ctx.switch_path(path, examples_before(path, round_) + done * options_.batch_size, false);
  }

  AlgorithmOptions options_;
  DipacoOptions own_;
  OuterOptimizer outer_;
  at::Tensor anchor_;
  at::Tensor delta_;  // [N] CPU: this island's deltas, then the modules' averages
  std::vector<Module> modules_;  // ascending module id
  int64_t round_ = 0;
  int64_t last_step_ = 0;
  int64_t step_ = 0;                        // the last inner step seen
  std::vector<std::vector<int>> path_mods_;  // fewer islands than paths: each path's modules
};

}  // namespace

std::unique_ptr<Algorithm> make_dipaco(const AlgorithmOptions& options, int) {
  return std::make_unique<DiPaCo>(options);
}

}  // namespace atl::algorithms
