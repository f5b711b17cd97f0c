#include "transport/zmq/star_client.h"

#include <ATen/ATen.h>

#include "src/base/log.h"
#include "transport/collectives/attempt.h"
#include "transport/star.h"

namespace atl::transport {

namespace {

// The RESULT_INFO body at the start of a star reply, and the bytes after it (the mean's frame).
Status parse_reply(const std::vector<uint8_t>& body, collectives::ResultInfo* info, size_t* info_bytes) {
  *info_bytes = collectives::result_info_size(body.data(), body.size());
  if (*info_bytes == 0 || *info_bytes > body.size()) return corrupt("star all-reduce: truncated result");
  return collectives::parse_result_info(body.data(), *info_bytes, info);
}

}  // namespace

StarClient::StarClient(ControlPlane& control, const ZmqGroupOptions& options)
    : control_(control), options_(options) {
  if (options_.first_seq > 0) {
    Status st = control_.push(star::tag(options_.first_seq, star::TagKind::kFirstSeq), {}, 1.0);
    if (!st.is_ok()) {
      ATOLL_WARN("star all-reduce: island " << control_.self() << " could not tell the coordinator that it takes part "
                                            << "from collective #" << options_.first_seq << " on: " << st.to_string());
    }
  }
  worker_ = std::thread([this] { run(); });
}

StarClient::~StarClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

bool StarClient::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

std::unique_ptr<Handle> StarClient::allreduce_mean(uint64_t seq, at::Tensor buffer, const compression::Pipeline& codec,
                                                   double weight, at::Tensor transmitted) {
  auto done = std::make_shared<Completion>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Op{seq, std::move(buffer), std::move(transmitted), codec, weight, done});
  }
  cv_.notify_all();
  return std::make_unique<CompletionHandle>(std::move(done));
}

ByteCounters StarClient::bytes() const { return {sent_.load(), received_.load(), raw_.load()}; }

void StarClient::run() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    op.done->finish(execute(op));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (Op& op : queue_) op.done->finish({Status(StatusCode::kUnavailable, "the ZmqGroup was destroyed"), {}, 0});
}

CollectiveResult StarClient::execute(Op& op) {
  const int self = control_.self();
  const int64_t n = op.buffer.numel();
  const std::string what = "star all-reduce #" + std::to_string(op.seq);
  auto failed = [](Status st) { return CollectiveResult{std::move(st), {}, 0}; };
  // PULLs `kind` until it is answered, waiting `wait` at a time (times `growth` after each
  // expiry); counts the reply's bytes.
  auto fetch = [&](star::TagKind kind, Clock::duration wait, int growth) -> StatusOr<std::vector<uint8_t>> {
    StatusOr<std::vector<uint8_t>> reply = Status(StatusCode::kTimeout, "");
    while (!reply.is_ok() && reply.status().code() == StatusCode::kTimeout) {
      if (stopping()) return Status(StatusCode::kUnavailable, "the ZmqGroup was destroyed");
      reply = control_.pull(star::tag(op.seq, kind), Clock::now() + wait);
      wait *= growth;
    }
    if (reply.is_ok()) received_ += reply->size();
    return reply;
  };

  // 1. The contribution, encoded once.
  std::vector<uint8_t> frame;
  op.codec.encode(op.buffer, frame, star::contribution_seed(op.seq, self));
  if (op.transmitted.defined()) {
    Status st = op.codec.decode(frame.data(), frame.size(), op.transmitted);
    TORCH_CHECK(st.is_ok(), "star all-reduce: own encoding failed to decode: ", st.to_string());
  }
  sent_ += frame.size();
  raw_ += static_cast<uint64_t>(n) * sizeof(float);
  if (Status st = control_.push(star::tag(op.seq, star::TagKind::kData), std::move(frame), op.weight); !st.is_ok()) {
    return failed(Status(st.code(), what + ": " + st.message()));
  }

  // 2. Completion.
  StatusOr<std::vector<uint8_t>> reply = fetch(star::TagKind::kInfo, kWaitSlice, 1);
  if (!reply.is_ok()) return failed(Status(reply.status().code(), what + ": " + reply.status().message()));
  collectives::ResultInfo info;
  size_t info_bytes = 0;
  if (Status st = parse_reply(*reply, &info, &info_bytes); !st.is_ok()) return failed(st);
  const bool member = contains(info.contributors, self);
  if (info.status != StatusCode::kOk && info.status != StatusCode::kPeerLost &&
      info.status != StatusCode::kMembershipChanged) {
    return failed(Status(info.status, what + " failed at the coordinator (its log says why)"));
  }
  if (!member || info.status == StatusCode::kMembershipChanged) {  // it went on without this island
    return {Status(StatusCode::kMembershipChanged, what + ": island " + std::to_string(self) + " is not among its contributors"),
            {self}, op.weight};
  }
  Status status = info.status == StatusCode::kOk
                      ? Status::ok()
                      : Status(StatusCode::kPeerLost, what + ": members left; the mean is the survivors'");
  if (info.contributors.size() == 1) {  // alone: the mean of one buffer is that buffer, bitwise
    if (op.transmitted.defined()) op.transmitted.copy_(op.buffer);
    return {std::move(status), info.contributors, op.weight};
  }
  if (info.numel != static_cast<uint64_t>(n)) {
    return failed(Status(StatusCode::kInternal, what + ": the coordinator's mean has " + std::to_string(info.numel) +
                                                    " values, this island's buffer " + std::to_string(n)));
  }

  // 3. The mean.
  const double bytes = static_cast<double>(op.codec.max_encoded_size(n) + info_bytes);
  const auto timeout =
      transfer_timeout(options_.timeout_slack, options_.latency_ms / 1e3, bytes, options_.bandwidth_mbps * 1e6 / 8);
  reply = fetch(star::TagKind::kData, timeout, 2);
  if (!reply.is_ok()) return failed(Status(reply.status().code(), what + ": " + reply.status().message()));
  if (Status st = parse_reply(*reply, &info, &info_bytes); !st.is_ok()) return failed(st);
  Status decoded = op.codec.decode(reply->data() + info_bytes, reply->size() - info_bytes, op.buffer);
  if (!decoded.is_ok()) return failed(Status(StatusCode::kCorrupt, what + ": the mean did not decode: " + decoded.message()));
  return {std::move(status), info.contributors, info.weight_sum};
}

}  // namespace atl::transport
