// LatencyWindow: a channel's recent answer times, for the p95 hedge delay
// (ChannelOptions::hedge_after_p95). Two histograms of power-of-two microsecond buckets: the
// current window and the one before it. A window closes when it is at least `window` old and
// holds at least `min_samples` answers; the older histogram is then cleared and becomes the
// current one. A percentile reads both, so it reflects the last one to two windows of answers
// and never an answer older than two closed windows: after the latency shifts, it follows
// within two window closes. With no answers no window closes: the last estimate stays.
// docs/cluster.md ("Hedged requests") says why two windows rather than a halving decay.
//
// Thread-safe without a lock: Record is called by whichever thread ends a call (a reactor, or
// the caller), Percentile by any calling thread. Counts are relaxed atomics; a record racing a
// window's close may land in the histogram being cleared and be lost, which moves a percentile
// by one answer in thousands.
#pragma once

#include <atomic>
#include <cstdint>

#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

class LatencyWindow {
 public:
  // The first window opens at `start`.
  LatencyWindow(MonoDelta window, int64_t min_samples, MonoTime start);

  // An answer that took `latency`, received at `now` (which may close the current window).
  void Record(MonoDelta latency, MonoTime now) {
    const int current = current_.load(std::memory_order_acquire);
    Window& w = windows_[current];
    w.buckets[Bucket(latency)].fetch_add(1, std::memory_order_relaxed);
    const int64_t n = w.count.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n >= min_samples_ && now.ToNanoseconds() >= close_at_ns_.load(std::memory_order_relaxed)) {
      Close(current, now);
    }
  }

  // The latency under which `percent` (0-100) of the answers of the last windows came, rounded
  // up to a power of two microseconds; MonoDelta() while fewer than `min_samples` are known.
  MonoDelta Percentile(double percent) const;

  // Answers counted now (both windows).
  int64_t samples() const;

  static constexpr int kBuckets = 32;  // bucket i: up to 2^i us; the last holds everything above

 private:
  struct Window {
    std::atomic<int64_t> buckets[kBuckets] = {};
    std::atomic<int64_t> count{0};
  };

  static int Bucket(MonoDelta latency) {
    const int64_t us = latency.ToMicroseconds();
    if (us <= 1) return 0;
    // The smallest i with 2^i >= us.
    const int bits = 64 - __builtin_clzll(static_cast<uint64_t>(us - 1));
    return bits < kBuckets ? bits : kBuckets - 1;
  }
  // Closes window `current` (unless another thread just did): the other one is cleared and
  // becomes current.
  void Close(int current, MonoTime now);

  const int64_t window_ns_;
  const int64_t min_samples_;
  Window windows_[2];
  std::atomic<int> current_{0};
  // When the current window may close (MonoTime nanoseconds).
  std::atomic<int64_t> close_at_ns_;
};

}  // namespace rrpc::rpc
