#include "transport/gloo/gloo_group.h"

#include <ATen/ATen.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <csignal>
#include <exception>
#include <mutex>

#include "src/base/log.h"
#include "transport/collectives/attempt.h"
#include "transport/collectives/schedules.h"
#include "transport/completion.h"
#include "transport/gloo/control_store.h"
#include "transport/gloo/mesh.h"

namespace atl::transport {

namespace {

// Unwinding (the mesh broke, a frame did not decode, the group is shutting down) frees a
// collective's buffers: the send buffers of its GlooWire and the receive buffers in its
// program's frame. The pairs are closed first, or gloo's device thread could still be
// writing from or into them (writev: Bad address, a crash, or freed memory overwritten):
// declared after the wire and the program, this is destroyed before them.
struct ClosePairsOnUnwind {
  gloo_mesh::Mesh& mesh;
  const int exceptions = std::uncaught_exceptions();
  ~ClosePairsOnUnwind() {
    if (std::uncaught_exceptions() > exceptions) mesh.close_pairs();
  }
};

// How often a blocked worker's mesh is checked for a peer's "closed" key.
constexpr auto kClosedCheckPeriod = std::chrono::seconds(1);

// gloo writes with writev(2), which raises SIGPIPE on a connection the peer has closed; the
// default action would kill the island instead of letting the mesh be rebuilt.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

struct GlooGroup::Op {
  collectives::Request req;
  compression::Pipeline codec;
  std::vector<uint8_t> gather_in;   // allgather: this member's bytes
  std::shared_ptr<Completion> done;
};

struct GlooGroup::Retained {
  uint64_t seq = 0;
  collectives::Kept kept;
};

GlooGroup::GlooGroup(ControlPlane& control, GlooGroupOptions options)
    : NetGroup(control, options.first_seq, options.first_seqs, options.in_flight), options_(std::move(options)),
      waits_(std::make_unique<gloo_mesh::Waits>()), counters_(std::make_shared<gloo_mesh::Counters>()) {
  TORCH_CHECK(options_.chunk_bytes >= 4, "GlooGroupOptions::chunk_bytes must hold one float");
  ignore_sigpipe();
  ::gloo::transport::tcp::attr attr;
  attr.hostname = options_.host;
  device_ = ::gloo::transport::tcp::CreateDevice(attr);
  worker_ = std::thread([this] { work(); });
  watchdog_ = std::thread([this] { watch(); });
}

GlooGroup::GlooGroup(const GlooGroup& parent, uint32_t key, std::vector<int> ids)
    : NetGroup(parent, key, std::move(ids)), options_([&] {
        GlooGroupOptions o = parent.options_;
        o.store_prefix.append("k").append(std::to_string(key)).append("/");
        return o;
      }()),
      device_(parent.device_), waits_(std::make_unique<gloo_mesh::Waits>()), counters_(parent.counters_) {
  worker_ = std::thread([this] { work(); });
  watchdog_ = std::thread([this] { watch(); });
}

std::unique_ptr<Group> GlooGroup::subgroup(uint32_t key, std::vector<int> ids) {
  check_subgroup(key, ids, control_.self());
  return std::unique_ptr<Group>(new GlooGroup(*this, key, std::move(ids)));
}

GlooGroup::~GlooGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  waits_->close("the group is shutting down");
  worker_.join();
  watchdog_.join();
  mesh_.reset();  // closes the pairs while the device still runs
}

MembershipView GlooGroup::view() const {
  const Membership m = control_.membership();
  return {m.epoch, collective_members(m, ids_), control_.self()};
}

// Numbers an op and hands it to the worker thread; its handle completes when the worker is
// done with it.
std::unique_ptr<Handle> GlooGroup::enqueue(std::unique_ptr<Op> op) {
  op->req.seq = next_seq_++;
  op->done = std::make_shared<Completion>();
  auto handle = std::make_unique<CompletionHandle>(op->done);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
  }
  cv_.notify_all();
  return handle;
}

std::unique_ptr<Handle> GlooGroup::allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                                  double weight, at::Tensor transmitted) {
  check_allreduce(buffer, weight, transmitted);
  auto op = std::make_unique<Op>();
  op->codec = codec;
  collectives::Request& r = op->req;
  r.hello = {collectives::kHelloAllreduce, static_cast<uint64_t>(buffer.numel()), weight,
             collectives::codec_fingerprint(codec), static_cast<uint64_t>(std::max<int64_t>(1, options_.chunk_bytes / 4))};
  r.buffer = std::move(buffer);
  r.transmitted = std::move(transmitted);
  return enqueue(std::move(op));
}

std::unique_ptr<Handle> GlooGroup::broadcast(int root, at::Tensor buffer, const compression::Pipeline& codec) {
  check_buffer(buffer);
  auto op = std::make_unique<Op>();
  op->codec = codec;
  collectives::Request& r = op->req;
  r.hello = {collectives::kHelloBroadcast, static_cast<uint64_t>(buffer.numel()), 1.0,
             collectives::codec_fingerprint(codec), static_cast<uint64_t>(INT64_MAX), root};  // one piece
  r.buffer = std::move(buffer);
  return enqueue(std::move(op));
}

std::unique_ptr<Handle> GlooGroup::allgather(std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out) {
  TORCH_CHECK(out != nullptr, "allgather: no output");
  auto op = std::make_unique<Op>();
  op->gather_in = std::move(bytes);
  collectives::Request& r = op->req;
  r.hello = {collectives::kHelloAllgather, op->gather_in.size(), 1.0, 0, 1};
  r.gather_in = &op->gather_in;
  r.gather_out = out;
  return enqueue(std::move(op));
}

ByteCounters GlooGroup::bytes() const {
  ByteCounters c{counters_->sent.load(), counters_->received.load(), counters_->raw_sent.load()};
  return c += server_.bytes();
}

uint64_t GlooGroup::meshes_built() const {
  std::lock_guard<std::mutex> lock(mu_);
  return meshes_built_;
}

void GlooGroup::work() {
  for (;;) {
    std::unique_ptr<Op> op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    run(*op);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& op : queue_) op->done->finish({Status(StatusCode::kUnavailable, "the group was destroyed"), {}, 0});
  queue_.clear();
}

void GlooGroup::run(Op& op) {
  const int self = control_.self();
  const uint64_t seq = op.req.seq;
  op.req.codec = &op.codec;
  op.req.result_piece_elems = INT64_MAX;  // a hand-over is one gloo message
  // An all-reduce, and a broadcast's receivers, compute into a tensor of their own (kept for
  // the hand-over): the caller's buffer stays the input until the collective completes, so a
  // restart begins from it and a collective that ends without a result leaves it unchanged.
  const auto kind = op.req.hello.kind;
  if (kind == collectives::kHelloAllreduce || (kind == collectives::kHelloBroadcast && op.req.hello.root != self)) {
    op.req.result = pool_.take(op.req.buffer.numel());
  }
  auto fail = [&](Status st, std::vector<int> contributors = {}, double weight = 0) {
    complete(op, {std::move(st), std::move(contributors), weight});
  };
  op.req.first_members = collective_members(control_.membership(), ids_);  // one missing from the final mesh was lost
  for (;;) {
    if (Status st = ensure_mesh(op); !st.is_ok()) {
      if (st.code() != StatusCode::kMembershipChanged) return fail(std::move(st));
      return fail(std::move(st), {self}, op.req.hello.weight);  // outside the membership: its own input
    }
    const uint64_t epoch = mesh_->epoch(), generation = mesh_->generation();
    try {
      serve_donations();
      // The rendezvous states answer for every member: a member that finished this
      // collective before the mesh broke hands its result over, and those that do not run it
      // sit it out.
      collectives::Attempt a{mesh_->ids(), {}, "gloo"};
      const int donor = mesh_->donor(seq);
      const std::vector<int> parts = mesh_->participants(seq);
      for (int p : a.members) {
        if (p == donor) a.known[p] = collectives::Tag::kResultInfo;
        else if (p != self && (donor >= 0 || !contains(parts, p))) a.known[p] = collectives::Tag::kAbsent;
      }
      gloo_mesh::GlooWire gw(*mesh_, *waits_, *counters_, seq);
      // The data phase's timeout for `bytes` received: slack * (latency + bytes / bandwidth) + 1 s.
      gw.on_data_phase = [this](double bytes) {
        set_suspect_deadline(transfer_timeout(options_.timeout_slack, options_.latency_ms / 1000, bytes,
                                              std::max(1.0, options_.bandwidth_mbps * 1e6 / 8)));
      };
      CollectiveResult r;
      collectives::Program program = collectives::attempt(gw, op.req, std::move(a), &r);
      ClosePairsOnUnwind close_on_unwind{*mesh_};  // declared after what it protects
      program.run();
      complete(op, std::move(r));
      return;
    } catch (const collectives::CorruptFrame& e) {
      const std::string what = "collective #" + std::to_string(seq) + ": " + e.what();
      ATOLL_ERROR("gloo: island " << self << ": " << what);
      mesh_broken_ = true;  // the sender's collective cannot complete on this mesh either
      return fail(Status(StatusCode::kCorrupt, what));
    } catch (const gloo_mesh::MeshBroken& e) {
      if (!stop_) {
        ATOLL_WARN("gloo: island " << self << ", collective #" << seq << ": mesh (epoch " << epoch << ", generation "
                                   << generation << ") broke: " << e.what() << "; restarting it in a new mesh");
      }
    } catch (const ::gloo::Exception& e) {
      ATOLL_WARN("gloo: island " << self << ", collective #" << seq << ": mesh (epoch " << epoch << ", generation "
                                 << generation << ") failed: " << e.what() << "; restarting it in a new mesh");
    } catch (const std::exception& e) {  // a broken invariant (gloo's GLOO_ENFORCE, TORCH_CHECK): no retry
      ATOLL_ERROR("gloo: island " << self << ", collective #" << seq << ": " << e.what());
      mesh_broken_ = true;
      return fail(Status(StatusCode::kInternal, e.what()));
    }
    mesh_broken_ = true;
    set_suspect_deadline(std::nullopt);
  }
}

Status GlooGroup::ensure_mesh(const Op& op) {
  const int self = control_.self();
  bool bump = mesh_broken_;  // a broken mesh of this epoch is replaced by the next generation
  if (mesh_broken_ && mesh_) {
    // Its peers see the pairs close and rebuild too; one in the middle of a message with
    // this island is not told by gloo, and finds the key instead (watch()).
    (void)control_.store_set(mesh_->closed_key(), {1});
    mesh_.reset();
  }
  for (;;) {
    if (stop_) return Status(StatusCode::kUnavailable, "the group is shutting down");
    const Membership m = control_.membership();
    if (mesh_ && !mesh_broken_ && mesh_->epoch() == m.epoch) return Status::ok();
    std::vector<int> ids = collective_members(m, ids_);
    if (!contains(ids, self)) {
      return Status(StatusCode::kMembershipChanged,
                    "island " + std::to_string(self) + " is not a member of epoch " + std::to_string(m.epoch));
    }
    if (!built_epoch_ || *built_epoch_ != m.epoch) {
      built_epoch_ = m.epoch;
      built_generation_ = 0;
    } else if (bump) {
      ++built_generation_;
    }
    bump = false;
    mesh_.reset();
    mesh_broken_ = false;
    donations_served_ = false;
    waits_->reset();
    const gloo_mesh::MeshOptions mo{.control = &control_, .device = device_, .prefix = options_.store_prefix,
                                    .connect_timeout = std::chrono::milliseconds(options_.connect_timeout_ms),
                                    .store_wait = std::chrono::milliseconds(options_.store_wait_ms), .stop = &stop_,
                                    .group = key_};
    const gloo_mesh::MemberState mine{op.req.seq, retained_ ? retained_->seq : gloo_mesh::kNoSeq};
    try {
      mesh_ = gloo_mesh::Mesh::build(mo, m.epoch, built_generation_, ids, self, mine);
      uint64_t built;
      {
        std::lock_guard<std::mutex> lock(mu_);
        built = ++meshes_built_;
        closed_key_ = mesh_->closed_key();
      }
      if (built > 1) {
        ATOLL_INFO("gloo: island " << self << " joined mesh (epoch " << m.epoch << ", generation " << built_generation_
                                   << ") of islands [" << ids_text(ids) << "]");
      }
      return Status::ok();
    } catch (const gloo_mesh::RendezvousError& e) {
      // The epoch moved on (the next round builds for it) or the store failed (retried).
      ATOLL_DEBUG("gloo: island " << self << ": rendezvous of epoch " << m.epoch << " abandoned: " << e.what());
      if (control_.membership().epoch == m.epoch && !stop_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_ms));
      }
    } catch (const std::exception& e) {  // gloo::Exception, or a GLOO_ENFORCE while connecting
      ATOLL_WARN("gloo: island " << self << ": mesh (epoch " << m.epoch << ", generation " << built_generation_
                                 << ") did not connect: " << e.what());
      bump = true;  // the members that did connect see this island's pairs close, and follow
    }
    mesh_.reset();
  }
}

void GlooGroup::serve_donations() {
  if (donations_served_) return;
  if (retained_ && mesh_->donor(retained_->seq) == mesh_->self()) {
    for (int to : mesh_->adopters(retained_->seq)) {
      gloo_mesh::GlooWire gw(*mesh_, *waits_, *counters_, retained_->seq);
      collectives::Program program = collectives::hand_over(gw, retained_->kept, to, INT64_MAX);
      ClosePairsOnUnwind close_on_unwind{*mesh_};
      program.run();
      ATOLL_INFO("gloo: island " << mesh_->self() << " hands collective #" << retained_->seq << "'s result to island "
                                 << to);
    }
  }
  donations_served_ = true;
}

void GlooGroup::complete(Op& op, CollectiveResult result) {
  set_suspect_deadline(std::nullopt);
  const StatusCode code = result.status.code();
  if ((code == StatusCode::kOk || code == StatusCode::kPeerLost) && !result.contributors.empty()) {
    // Kept until the next collective finishes: by then every member has finished this one
    // (it issued the next), so no restart can ask for it any more.
    if (retained_) pool_.give(std::move(retained_->kept.values));
    if (op.req.gather_out) {
      retained_ = std::make_unique<Retained>(Retained{op.req.seq, {result, collectives::pack_gathered(*op.req.gather_out)}});
    } else if (op.req.result.defined()) {
      op.req.buffer.copy_(op.req.result);  // before the caller is woken
      retained_ = std::make_unique<Retained>(Retained{op.req.seq, {result, std::move(op.req.result)}});
    } else {  // a broadcast's root
      at::Tensor copy = pool_.take(op.req.buffer.numel());
      copy.copy_(op.req.buffer);
      retained_ = std::make_unique<Retained>(Retained{op.req.seq, {result, std::move(copy)}});
    }
  } else {
    pool_.give(std::move(op.req.result));
  }
  op.done->finish(std::move(result));
}

void GlooGroup::set_suspect_deadline(std::optional<Clock::duration> timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  suspect_timeout_ = timeout.value_or(Clock::duration{});
  suspect_at_ = timeout ? Clock::now() + *timeout : Clock::time_point::max();
}

void GlooGroup::watch() {
  const int self = control_.self();
  const auto poll = std::chrono::milliseconds(options_.poll_ms);
  uint64_t seen = control_.membership().epoch;
  Clock::time_point last_closed_check = Clock::now();
  while (!stop_) {
    Clock::time_point deadline = Clock::now() + poll;
    {
      std::lock_guard<std::mutex> lock(mu_);
      deadline = std::min(deadline, suspect_at_);
    }
    const Membership m = control_.wait_for_change(seen, deadline);
    seen = m.epoch;
    if (stop_) break;
    // A wait on an island the coordinator has dropped (or with this island dropped) never ends.
    const int peer = waits_->waiting_on();
    const std::vector<int> ids = collective_members(m, ids_);
    if (peer >= 0 && (!contains(ids, peer) || !contains(ids, self))) {
      const std::string why = contains(ids, self) ? "island " + std::to_string(peer) + " left the membership (epoch " +
                                                        std::to_string(m.epoch) + ")"
                                                  : "island " + std::to_string(self) + " is not a member of epoch " +
                                                        std::to_string(m.epoch);
      waits_->interrupt(peer, why);
    }
    // A peer that abandoned the mesh while a message with this island was half sent or
    // received: gloo never completes that message, the peer's key says so.
    if (peer >= 0 && Clock::now() - last_closed_check >= kClosedCheckPeriod) {
      last_closed_check = Clock::now();
      std::string key;
      {
        std::lock_guard<std::mutex> lock(mu_);
        key = closed_key_;
      }
      const auto wait = std::chrono::milliseconds(options_.store_wait_ms);
      if (!key.empty() && control_.store_get(key, Clock::now() + wait).is_ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (closed_key_ == key) waits_->interrupt(-1, "a member abandoned the mesh (" + key + ")");
      }
    }
    // A data phase that takes far longer than the bandwidth model allows: tell the coordinator.
    bool suspect = false;
    double waited = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Clock::now();
      if (now >= suspect_at_) {
        waited = std::chrono::duration<double>(suspect_timeout_).count();
        suspect_timeout_ *= 2;
        suspect_at_ = now + suspect_timeout_;
        suspect = true;
      }
    }
    if (suspect && peer >= 0) {
      ATOLL_WARN("gloo: island " << self << ": no progress from island " << peer << " within " << waited
                                 << " s; suspecting it");
      control_.suspect(peer);
    }
  }
}

}  // namespace atl::transport
