#include "src/core/cost_model.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace atl::core {

CostModel::CostModel(const config::ComputeConfig& compute, double flops_per_step, int islands,
                     uint64_t seed)
    : compute_(compute) {
  base_s_ = compute.step_time_s > 0 ? compute.step_time_s : flops_per_step / (compute.flops * compute.mfu);
  speeds_ = compute.speeds;
  speeds_.resize(static_cast<size_t>(islands), 1.0);  // added islands run at speed 1
  for (int i = 0; i < islands; ++i) {
    // splitmix-style spread so that neighbouring seeds and ids do not share streams
    const uint64_t s = (seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(i + 1)) ^ 0xc057c057ULL;
    state_.push_back({std::mt19937_64(s), 0});
  }
}

double CostModel::next_step_s(int island) {
  IslandState& st = state_[static_cast<size_t>(island)];
  double t = nominal_step_s(island);
  if (compute_.straggler_prob > 0) {
    const double u = std::uniform_real_distribution<double>(0, 1)(st.rng);
    if (st.straggling_left == 0 && u < compute_.straggler_prob) st.straggling_left = compute_.straggler_steps;
    if (st.straggling_left > 0) {
      t *= compute_.straggler_factor;
      --st.straggling_left;
    }
  }
  if (compute_.jitter > 0) {
    // Log-normal with mean 1 and relative std-dev `jitter`.
    const double sigma2 = std::log1p(compute_.jitter * compute_.jitter);
    std::normal_distribution<double> n(-sigma2 / 2, std::sqrt(sigma2));
    t *= std::exp(n(st.rng));
  }
  return t;
}

std::string CostModel::save() const {
  std::ostringstream out;
  out << state_.size();
  for (const auto& st : state_) out << ' ' << st.straggling_left << ' ' << st.rng;
  return out.str();
}

void CostModel::load(const std::string& text) {
  std::istringstream in(text);
  size_t n = 0;
  in >> n;
  if (!in || n != state_.size()) throw std::runtime_error("cost model state: for another number of islands");
  for (auto& st : state_) in >> st.straggling_left >> st.rng;
  if (in.fail()) throw std::runtime_error("cost model state: unreadable");
}

}  // namespace atl::core
