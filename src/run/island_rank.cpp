// A rank > 0 of an island of several ranks (`atoll island CONFIG --id K --rank r`;
// src/run/island_ranks.h, docs/ranks.md): rank 0 is IslandProcess (island_process.h).
#include <torch/torch.h>

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "src/base/log.h"
#include "src/checkpoint/checkpoint_file.h"
#include "src/core/checkpoint_gathering.h"
#include "src/core/components.h"
#include "src/core/island_parts.h"
#include "src/core/island_runtime.h"
#include "src/core/validate.h"
#include "src/run/handover.h"
#include "src/run/island_ranks.h"
#include "src/run/process_checkpoint.h"
#include "src/run/shard_plane.h"

namespace atl::run {

// A rank > 0 of an island of several ranks (src/run/island_ranks.h): the island's parts, the
// start rank 0 sends, and the island loop over rank 0's observations. No control plane, no
// records, evaluations or checkpoint files: rank 0's are the island's. It waits in the
// algorithm's exchanges where rank 0 waits in the run's (at checkpoint cuts too), so that
// both run the same algorithm calls in the same order.
Status run_rank(const config::Config& config, int island, IslandRanks& ranks, const std::map<int, std::string>& routes) {
  core::validate_config(config, core::Target::kIsland);
  core::configure_threads(config.run.threads);
  torch::manual_seed(config.run.seed);
  const core::RunData data = core::load_run_data(config);
  const algorithms::AlgorithmOptions algo_options = core::algorithm_options(config, data.shard_sizes);
  const compression::Pipeline codec = core::make_pipeline(config);
  core::IslandParts parts = core::make_island_parts(config, data, algo_options, island);
  // A re-routing (the paths' re-sharding) scores the paths on every rank, which then deal
  // their data alike from rank 0's gathered scores (the allgather is mirrored).
  std::unique_ptr<core::Evaluator> scorer = parts.rerouter ? core::make_evaluator(config, data) : nullptr;
  struct Release {  // the algorithm before the groups it holds sub-groups of
    core::IslandParts& parts;
    ~Release() { parts.algorithm.reset(); }
  };
  const IslandStart start = broadcast_start(ranks, {});
  if (start.kind == IslandStart::kNothing) return Status::ok();
  std::optional<IslandProcessCheckpoint> resumed;
  std::optional<Handover> handover;
  const std::string what = "island " + std::to_string(island) + " rank " + std::to_string(ranks.rank());
  if (start.kind == IslandStart::kResume) {
    auto file = checkpoint::decode(std::string_view(reinterpret_cast<const char*>(start.payload.data()), start.payload.size()),
                                   what + ": rank 0's checkpoint");
    if (!file.is_ok()) return file.status();
    auto c = decode_island(file.value(), what + ": rank 0's checkpoint");
    if (!c.is_ok()) return c.status();
    resumed = std::move(c.value());
  } else if (start.kind == IslandStart::kJoin) {
    handover.emplace();
    if (Status st = decode_handover(start.payload.data(), start.payload.size(), &*handover); !st.is_ok()) return st;
  }
  // islands.shard_exchange: this rank's shard plane, its endpoint to rank 0 (publish_shards).
  std::optional<ShardPlane> plane;
  RankShard shard;
  if (config.islands.shard_exchange) {
    // Where rank 0's checkpoint or its donor's hand-over says the planes were.
    std::map<uint32_t, uint64_t> keyed = resumed ? resumed->group_seqs : handover ? handover->subgroup_seqs
                                                                                : std::map<uint32_t, uint64_t>{};
    shard.seqs = take_shard_seqs(keyed, ranks.ranks());
    plane.emplace(config, ranks.place(), shard.seqs.group[static_cast<size_t>(ranks.rank())],
                  first_seqs(shard.seqs, ranks.rank()), routes);
    for (int r = 1; r < ranks.ranks(); ++r) {
      const std::string& e = plane->endpoint();
      ranks.broadcast_bytes(r == ranks.rank() ? std::vector<uint8_t>(e.begin(), e.end()) : std::vector<uint8_t>{}, r);
    }
    shard.group = &plane->group();
    shard.subgroup = [&plane](uint32_t key, std::vector<int> ids) { return plane->group().subgroup(key, std::move(ids)); };
    shard.bytes = [&plane] { return plane->bytes(); };
    shard.catch_up = [&plane](uint64_t epoch) { plane->catch_up(epoch); };
  }
  std::unique_ptr<transport::Group> group = mirrored_group(ranks, nullptr, island, plane ? &shard : nullptr);
  // Its shard of the outer optimizers' state, put together with the others' where rank 0
  // saves or hands it over (enrolled optimizers: declared before `release`).
  std::unique_ptr<algorithms::OuterShards> outer_shards = plane ? rank_outer_shards(ranks) : nullptr;
  Release release{parts};
  std::unique_ptr<algorithms::TimeSource> time = mirrored_time(ranks, nullptr);
  core::CheckpointSchedule schedule(config.checkpoint.every, handover ? handover->step : resumed ? resumed->step : 0);
  // Rank 0's signal cuts (IslandProcess::follow_signal_cut), in the same broadcast.
  const bool signal_cuts = config.checkpoint.every > 0 && parts.algorithm->checkpoint_cut() == algorithms::CheckpointCut::kStep;
  int64_t signal_cut = handover ? handover->step : resumed ? resumed->step : 0;  // as rank 0's
  auto follow_signal_cut = [&](int64_t) {
    if (!signal_cuts) return;
    const auto cut = static_cast<int64_t>(ranks.broadcast_double(0));
    if (cut <= signal_cut) return;
    signal_cut = cut;
    schedule.add_cut(cut);  // behind it: rank 0 marks it
  };
  auto at_boundary = [&](int64_t step, int64_t total) {
    for (int64_t cut : schedule.take_due(*parts.algorithm, step, total)) {
      (void)cut;
      parts.algorithm->wait_in_flight();  // as rank 0's checkpoint_at
      if (outer_shards) outer_shards->gather_all();
    }
  };
  // Rank 0's hand-overs to joiners (IslandProcess::hand_over), where the outer state is sharded.
  auto hand_over = [&] {
    if (outer_shards && !outer_shards->empty() && ranks.broadcast_flag(false)) outer_shards->gather_all();
  };
  core::IslandHost host;
  host.time = time.get();
  host.wall_s = [] { return 0.0; };
  host.record = [](const std::string&) {};
  host.is_lead = [] { return false; };
  host.eval_recorded = [](int64_t) { return true; };
  host.wait = [](double) {};
  host.eval_bytes = [] { return uint64_t{0}; };
  host.round_times = [] { return core::RoundTimes{}; };
  host.share = {ranks.rank(), ranks.ranks()};
  host.reduce_ranks = [&ranks](at::Tensor& grads, double loss) { return ranks.average(grads, loss); };
  host.scorer = scorer.get();
  host.outer_shards = outer_shards.get();
  host.after_step = [&](int64_t step, int64_t total, double, double) {
    follow_signal_cut(step);
    at_boundary(step, total);
    hand_over();
  };
  if (parts.algorithm->checkpoint_cut() == algorithms::CheckpointCut::kServerRound)
    host.after_setup = [&](int64_t step) { at_boundary(step, std::numeric_limits<int64_t>::max()); };
  core::IslandRuntime runtime(island, parts, config.train, group.get(), &codec, data.shard_sizes[island], nullptr,
                              data.classifier, std::move(host));
  if (resumed) {
    restore_island(parts, runtime, *resumed);
  } else if (handover) {
    runtime.join(std::move(*handover), group.get());
  }
  runtime.run();
  if (plane) {
    ATOLL_INFO(what << ": its shard plane sent " << plane->bytes().sent << " bytes");
    log_outer_state(*outer_shards, what);
  }
  return ranks.check_replica(parts.model->params());
}

}  // namespace atl::run
