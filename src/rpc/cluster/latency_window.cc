#include "rrpc/rpc/cluster/latency_window.h"

namespace rrpc::rpc {

LatencyWindow::LatencyWindow(MonoDelta window, int64_t min_samples, MonoTime start)
    : window_ns_(window.ToNanoseconds()),
      min_samples_(min_samples < 1 ? 1 : min_samples),
      close_at_ns_(start.ToNanoseconds() + window.ToNanoseconds()) {}

void LatencyWindow::Close(int current, MonoTime now) {
  int64_t close_at = close_at_ns_.load(std::memory_order_relaxed);
  if (now.ToNanoseconds() < close_at) return;
  // One thread closes the window: the one that moves the close time on.
  if (!close_at_ns_.compare_exchange_strong(close_at, now.ToNanoseconds() + window_ns_,
                                            std::memory_order_relaxed)) {
    return;
  }
  if (current_.load(std::memory_order_relaxed) != current) return;  // closed meanwhile
  Window& next = windows_[1 - current];
  for (auto& b : next.buckets) b.store(0, std::memory_order_relaxed);
  next.count.store(0, std::memory_order_relaxed);
  current_.store(1 - current, std::memory_order_release);
}

int64_t LatencyWindow::samples() const {
  return windows_[0].count.load(std::memory_order_relaxed) +
         windows_[1].count.load(std::memory_order_relaxed);
}

MonoDelta LatencyWindow::Percentile(double percent) const {
  // One read of each bucket, so the total and the scan agree even while a window closes.
  int64_t counts[kBuckets];
  int64_t total = 0;
  for (int i = 0; i < kBuckets; i++) {
    counts[i] = windows_[0].buckets[i].load(std::memory_order_relaxed) +
                windows_[1].buckets[i].load(std::memory_order_relaxed);
    total += counts[i];
  }
  if (total < min_samples_) return MonoDelta();
  const double wanted = static_cast<double>(total) * percent / 100;
  int64_t seen = 0;
  for (int i = 0; i < kBuckets - 1; i++) {
    seen += counts[i];
    if (static_cast<double>(seen) >= wanted) return MonoDelta::FromMicroseconds(int64_t{1} << i);
  }
  return MonoDelta::FromMicroseconds(int64_t{1} << (kBuckets - 1));
}

}  // namespace rrpc::rpc
