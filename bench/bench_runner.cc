#include "bench/bench_runner.h"

#include <algorithm>

namespace rrpc::bench {

void RunControl::Fail(const Status& status) {
  {
    MutexLock lock(mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    error_ = status;
    failed_.store(true, std::memory_order_release);
  }
  Stop();
}

Status RunControl::error() const {
  MutexLock lock(mu_);
  return error_;
}

void RunControl::SleepUntil(MonoTime until) const {
  // Short naps so a failure ends the run promptly; the main thread's wakeups cost little.
  constexpr auto kNap = MonoDelta::FromMilliseconds(20);
  while (!failed()) {
    const MonoDelta left = until - MonoTime::Now();
    if (left.ToNanoseconds() <= 0) return;
    SleepFor(std::min(left, kNap));
  }
}

void RunControl::RunWindow(double warmup_s, double run_s, UsageSnapshot* start,
                           UsageSnapshot* end) {
  SleepUntil(MonoTime::Now() + MonoDelta::FromSeconds(warmup_s));
  *start = TakeUsageSnapshot();
  start->wire_bytes = WireBytes();
  measure_start_ = MonoTime::Now();
  if (!failed()) phase_.store(static_cast<int>(Phase::kMeasuring), std::memory_order_release);
  SleepUntil(measure_start_ + MonoDelta::FromSeconds(run_s));
  // Snapshot before stopping: client threads end as soon as they see kStopping, and a thread
  // gone before the snapshot would drop out of the client/server split.
  *end = TakeUsageSnapshot();
  end->wire_bytes = WireBytes();
  measure_end_ = MonoTime::Now();
  Stop();
}

namespace {
std::atomic<uint64_t> next_recorders_id{1};
}  // namespace

LatencyRecorders::LatencyRecorders() : id_(next_recorders_id.fetch_add(1)) {}

LatencyRecorders::PerThread* LatencyRecorders::Local() {
  // Every instance this thread recorded into, by id (ids are never reused, so an entry of a
  // destroyed instance is never matched). One thread may record into several at once: the mixed
  // mode's client reactor completes small and bulk calls in turn. (A single cached entry made a
  // fresh recorder, a zeroed histogram of megabytes, at each switch: page faults on the reactor
  // the small calls' latency was measured on, and hundreds of megabytes by the end of a run.)
  thread_local std::vector<std::pair<uint64_t, PerThread*>> cached;
  for (auto it = cached.rbegin(); it != cached.rend(); ++it) {
    if (it->first == id_) return it->second;
  }
  auto fresh = std::make_unique<PerThread>();
  PerThread* raw = fresh.get();
  {
    MutexLock lock(mu_);
    recorders_.push_back(std::move(fresh));
  }
  cached.emplace_back(id_, raw);
  return raw;
}

void LatencyRecorders::Merge(uint64_t* completed, Histogram* latency_ns) const {
  MutexLock lock(mu_);
  for (const auto& r : recorders_) {
    *completed += r->completed;
    latency_ns->Merge(r->latency_ns);
  }
}

void LatencyRecorders::MergeRetries(uint64_t* rejected, uint64_t* retries) const {
  MutexLock lock(mu_);
  for (const auto& r : recorders_) {
    *rejected += r->rejected;
    *retries += r->retries;
  }
}

}  // namespace rrpc::bench
