// The recorder of a cluster benchmark's calls and the figures of a server lost under load, shared
// by cluster-bench (cluster_bench_main.cc, cluster_bench_drop.cc) and kv-cluster-bench
// (examples/kv): every call's end and latency, and from them p99 before and after the loss,
// throughput per 100 ms against the steady rate, and the time back to 60% of it. Header-only,
// on rrpc_util alone, so the example links no benchmark library. Record is called by the clients'
// reactors; the figures are read after the load stopped.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "rrpc/util/monotime.h"
#include "util/histogram.h"

namespace rrpc::bench {

// Every call's end: when (ms since the recorder started) and how long it took (us). Filled by
// the client reactors through one atomic index; samples past the capacity are dropped.
class Recorder {
 public:
  explicit Recorder(size_t capacity) : samples_(capacity), start_(MonoTime::Now()) {}
  struct Sample {
    uint32_t end_ms;
    uint32_t latency_us;
  };
  void Record(MonoTime sent, MonoTime now) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= samples_.size()) return;
    samples_[i] = {
        static_cast<uint32_t>((now - start_).ToMilliseconds()),
        static_cast<uint32_t>(std::min<int64_t>((now - sent).ToMicroseconds(), 1 << 30))};
  }
  double Elapsed() const { return (MonoTime::Now() - start_).ToSeconds(); }
  // The samples that ended within [from, to) seconds.
  Histogram Window(double from, double to) const {
    Histogram h(60'000'000);
    const size_t n = std::min(next_.load(), samples_.size());
    for (size_t i = 0; i < n; i++) {
      const double t = samples_[i].end_ms / 1000.0;
      if (t >= from && t < to) h.Record(samples_[i].latency_us);
    }
    return h;
  }
  // Calls ended per 100 ms slot, from 0 to `seconds`.
  std::vector<int64_t> PerSlot(double seconds) const {
    std::vector<int64_t> slots(static_cast<size_t>(seconds * 10) + 1, 0);
    const size_t n = std::min(next_.load(), samples_.size());
    for (size_t i = 0; i < n; i++) {
      const size_t slot = samples_[i].end_ms / 100;
      if (slot < slots.size()) slots[slot]++;
    }
    return slots;
  }

 private:
  std::vector<Sample> samples_;
  std::atomic<size_t> next_{0};
  const MonoTime start_;
};

// A server lost at `lost_at` (seconds of the recorder): the steady window is [1, lost_at) (the
// first second is warm-up), the after window [lost_at, lost_at + after_seconds).
struct LossFigures {
  Histogram steady{60'000'000};
  Histogram after{60'000'000};
  double steady_per_sec = 0;
  // Per 100 ms slot after the loss, against the steady rate: the lowest share; the end of the
  // first slot at >= 60% (the loss's own dip), and of the last one below it (any later dip,
  // which on a shared machine may be someone else's load); seconds after the loss.
  double lowest_share = 0;
  double back_to_60pct_s = -1;
  double last_below_60pct_s = 0;
  std::vector<int64_t> per_second_after;  // calls ended in each second after the loss
};

inline LossFigures FiguresOfLoss(const Recorder& recorder, double lost_at, double end,
                                 double after_seconds) {
  LossFigures f;
  f.steady = recorder.Window(1, lost_at);
  f.after = recorder.Window(lost_at, lost_at + after_seconds);
  f.steady_per_sec = f.steady.count() / (lost_at - 1);
  const double steady_per_slot = f.steady_per_sec / 10;
  const std::vector<int64_t> slots = recorder.PerSlot(end);
  const size_t lost_slot = static_cast<size_t>(lost_at * 10);
  f.lowest_share = 1e9;
  for (size_t s = lost_slot; s + 1 < slots.size(); s++) {
    const double share = slots[s] / steady_per_slot;
    const double slot_end = (s + 1) / 10.0 - lost_at;
    f.lowest_share = std::min(f.lowest_share, share);
    if (share >= 0.6 && f.back_to_60pct_s < 0) f.back_to_60pct_s = slot_end;
    if (share < 0.6) f.last_below_60pct_s = slot_end;
  }
  for (int s = 0; s < static_cast<int>(after_seconds); s++) {
    int64_t n = 0;
    for (int k = 0; k < 10; k++) {
      const size_t slot = lost_slot + s * 10 + k;
      if (slot < slots.size()) n += slots[slot];
    }
    f.per_second_after.push_back(n);
  }
  return f;
}

inline double Ms(uint64_t us) { return us / 1000.0; }

// Prints `per_second` comma-separated, then a newline.
inline void PrintCounts(const std::vector<int64_t>& per_second) {
  for (size_t s = 0; s < per_second.size(); s++) printf("%s%ld", s > 0 ? "," : "", per_second[s]);
  printf("\n");
}

}  // namespace rrpc::bench
