#include "transport/inproc/scheduler.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace atl::transport {

Scheduler::Scheduler(int participants) : slots_(static_cast<size_t>(participants)) {
  if (participants < 1) throw std::invalid_argument("Scheduler needs at least one participant");
}

int Scheduler::pick_locked() {
  int best = -1;
  double best_time = 0;
  for (int i = 0; i < size(); ++i) {
    Slot& s = slots_[i];
    if (s.finished) continue;
    double t = s.time;
    if (s.ready && !s.ready()) {
      const double wake = s.wake_at ? s.wake_at() : INFINITY;
      if (!std::isfinite(wake)) continue;
      t = std::max(s.time, wake);  // a timed wait: runnable at its wake-up time
    }
    if (best < 0 || t < best_time) {  // ties: lowest id (scan order)
      best = i;
      best_time = t;
    }
  }
  if (best >= 0 && slots_[best].ready && !slots_[best].ready()) {  // woken by its timer
    slots_[best].time = best_time;
    slots_[best].woken = true;
  }
  if (best < 0) {
    std::string blocked;
    for (int i = 0; i < size(); ++i) {
      if (!slots_[i].finished) blocked += " island " + std::to_string(i) + " waits for " + slots_[i].what + ";";
    }
    if (!blocked.empty()) {
      deadlock_ = "simulation deadlock:" + blocked;
      aborted_ = true;
    }
  }
  return best;
}

void Scheduler::wait_turn_locked(std::unique_lock<std::mutex>& lock, int id) {
  cv_.wait(lock, [&] { return current_ == id || aborted_; });
  if (aborted_ && current_ != id) throw SchedulerAborted();
}

void Scheduler::run(const std::function<void(int)>& body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = pick_locked();
  }
  std::vector<std::thread> threads;
  threads.reserve(slots_.size());
  for (int id = 0; id < size(); ++id) {
    threads.emplace_back([this, id, &body] {
      try {
        {
          std::unique_lock<std::mutex> lock(mu_);
          wait_turn_locked(lock, id);
        }
        body(id);
      } catch (const SchedulerAborted&) {
        // another participant failed first; its error is reported
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        aborted_ = true;
      }
      std::lock_guard<std::mutex> lock(mu_);
      slots_[id].finished = true;
      slots_[id].ready = nullptr;
      if (!aborted_) current_ = pick_locked();
      cv_.notify_all();
    });
  }
  for (auto& t : threads) t.join();
  if (error_) std::rethrow_exception(error_);
  if (!deadlock_.empty()) throw std::runtime_error(deadlock_);
}

bool Scheduler::block_until(int id, const std::function<bool()>& ready, const std::string& what,
                            const std::function<double()>& wake_at) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw SchedulerAborted();
  if (ready()) return true;
  Slot& s = slots_[id];
  s.ready = ready;
  s.what = what;
  s.wake_at = wake_at;
  s.woken = false;
  current_ = pick_locked();
  cv_.notify_all();
  wait_turn_locked(lock, id);
  s.ready = nullptr;
  s.wake_at = nullptr;
  return !s.woken;
}

void Scheduler::yield(int id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw SchedulerAborted();
  if (current_ != id) return;  // not inside run() (e.g. reading a group's view afterwards)
  current_ = pick_locked();
  if (current_ == id) return;
  cv_.notify_all();
  wait_turn_locked(lock, id);
}

void Scheduler::set_time(int id, double time) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_[id].time = time;
}

void Scheduler::advance(int id, double time) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_[id].time = std::max(slots_[id].time, time);
}

bool Scheduler::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

int Scheduler::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

double Scheduler::time(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_[id].time;
}

}  // namespace atl::transport
