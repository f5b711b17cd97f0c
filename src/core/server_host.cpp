#include "src/core/server_host.h"

#include <cmath>

namespace atl::core {

ServerHost::ServerHost(const algorithms::AlgorithmOptions& options, const config::TrainConfig& train,
                       int64_t train_examples, Hooks hooks)
    : hooks_(std::move(hooks)), schedule_(options, train, train_examples) {}

std::unique_ptr<ServerHost> ServerHost::make(const algorithms::AlgorithmOptions& options,
                                             const config::TrainConfig& train, int64_t train_examples,
                                             const at::Tensor& initial, Hooks hooks) {
  std::unique_ptr<ServerHost> host(new ServerHost(options, train, train_examples, std::move(hooks)));
  ServerHost* self = host.get();
  host->server_ = algorithms::make_server(options, initial, [self](const algorithms::ServerRound& r) { self->on_round(r); });
  if (!host->server_) return nullptr;
  return host;
}

void ServerHost::on_round(const algorithms::ServerRound& r) {
  time_ = hooks_.round_time(r);
  round_ = r.round;
  const int64_t step = schedule_.after_round(r.round);
  if (r.selected >= 0)  // fedavg: which clients made it into the round (docs/metrics.md)
    hooks_.record(server_round_record(r, schedule_.label(r.round), RecordTime{hooks_.wall_s(), time_}));
  if (step >= 0) hooks_.evaluate(step, r.global, time_);
  if (hooks_.after_round) hooks_.after_round(r);
  global_ = r.global;
}

transport::OuterServer::State ServerHost::save() const {
  transport::OuterServer::State s = server_->state();
  for (auto& e : s.entries())
    if (e.tensor.defined()) e.tensor = e.tensor.clone();
  return s;
}

void ServerHost::load(const transport::OuterServer::State& state, int64_t round, double time_s) {
  server_->load(state);
  round_ = round;
  time_ = time_s;
  schedule_.resume(round);
  if (round > 0) global_ = *server_->on_pull(0, 0);  // the model the server serves
}

void ServerHost::evaluate_final() {
  if (global_.defined()) hooks_.evaluate(schedule_.label(round_), global_, time_);
}

}  // namespace atl::core
