#include "bench/bench_retry.h"

#include <algorithm>
#include <utility>

#include "rrpc/rpc/rpc_header.pb.h"
#include "util/thread.h"

namespace rrpc::bench {

bool IsServerTooBusy(const rpc::RpcController& controller) {
  const rpc::ErrorStatusPB* error = controller.error_response();
  return !controller.status().ok() && error != nullptr &&
         error->code() == rpc::ErrorStatusPB::ERROR_SERVER_TOO_BUSY;
}

MonoDelta RetryBackoff(int attempt, uint64_t* rng) {
  constexpr int64_t kFirstUs = 100;
  constexpr int64_t kMaxUs = 20'000;
  const int shift = std::min(std::max(attempt, 1) - 1, 20);
  const int64_t full = std::min(kMaxUs, kFirstUs << shift);
  uint64_t x = *rng;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *rng = x;
  const int64_t half = full / 2;
  return MonoDelta::FromMicroseconds(half +
                                     static_cast<int64_t>(x % static_cast<uint64_t>(half + 1)));
}

RetryTimer::~RetryTimer() { Stop(); }

Status RetryTimer::Start() {
  RRPC_ASSIGN_OR_RETURN(thread_, StartThread("bench", "client-retry", [this] { Loop(); }));
  return Status::OK();
}

void RetryTimer::Schedule(MonoTime when, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      const bool earliest = pending_.empty() || when < pending_.top().when;
      pending_.push(Entry{when, next_order_++, std::move(fn)});
      if (earliest) cv_.notify_one();
      return;
    }
  }
  fn();  // stopped already: run it now, it sees the run stopping
}

void RetryTimer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  // Entries scheduled while the thread drained (none can be added once stopping_ is set).
  std::unique_lock<std::mutex> lock(mu_);
  while (!pending_.empty()) {
    std::function<void()> fn = std::move(const_cast<Entry&>(pending_.top()).fn);
    pending_.pop();
    lock.unlock();
    fn();
    lock.lock();
  }
}

void RetryTimer::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (pending_.empty()) {
      if (stopping_) return;
      cv_.wait(lock);
      continue;
    }
    const MonoTime now = MonoTime::Now();
    if (!stopping_ && now < pending_.top().when) {
      const int64_t wait_ns = (pending_.top().when - now).ToNanoseconds();
      cv_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
      continue;
    }
    std::function<void()> fn = std::move(const_cast<Entry&>(pending_.top()).fn);
    pending_.pop();
    lock.unlock();
    fn();
    lock.lock();
  }
}

}  // namespace rrpc::bench
