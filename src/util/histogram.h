// Histogram: a log-linear histogram of non-negative integer values (latencies in microseconds or
// nanoseconds, sizes in bytes) with a fixed bucket array, in the manner of HdrHistogram.
//
// Precision: every power-of-two range [2^k, 2^(k+1)) is split into 128 equal buckets, and values
// below 256 get a bucket each. A bucket is therefore at most 1/128 (0.78%) of its smallest value
// wide: two significant decimal digits. Percentiles report a bucket's highest value (never less
// than the true value, at most 0.78% more), clamped to the recorded max.
//
// Cost: Record() is a handful of instructions (count leading zeros, two shifts, one add, an
// increment, sum/min/max updates); no allocation happens after construction. A histogram tracking
// up to 60 s in microseconds holds about 2,530 buckets (20 KiB).
//
// Values above max_value() are counted in an overflow bucket: they count in count(), sum(),
// max() and in percentiles (which then report max()), but in no finite bucket of
// ForEachNonEmptyBucket(), so a Prometheus "+Inf" bucket accounts for them honestly.
//
// Thread safety: none. One thread records into a Histogram at a time; readers must not run
// concurrently with writers. rpc-bench keeps one per thread and Merge()s them; the metrics layer
// (util/metrics/histogram_metric.h) stripes them and adds the locking.
//
// Example:
//   Histogram h(/*max_value=*/60'000'000);  // up to 60 s, in microseconds
//   h.Record(elapsed_us);
//   LOG(INFO) << "p99=" << h.ValueAtPercentile(99) << "us";
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rrpc {

class Histogram {
 public:
  // Values within [0, max_value] are bucketed with full precision. max_value in [1, 2^62].
  explicit Histogram(uint64_t max_value);
  Histogram(const Histogram& other);
  Histogram& operator=(const Histogram& other);
  Histogram(Histogram&&) noexcept = default;
  Histogram& operator=(Histogram&&) noexcept = default;
  ~Histogram() = default;

  void Record(uint64_t value) {
    // Values past the last bucket all land in the overflow slot at index num_buckets_.
    counts_[BucketIndex(value < overflow_start_ ? value : overflow_start_)]++;
    count_++;
    sum_ += value;
    if (value < min_) min_ = value;
    if (value > max_) max_ = value;
  }

  // Adds every value recorded in `other`. Histograms of any max_value merge; when the layouts
  // differ, other's buckets are re-recorded at their highest value.
  void Merge(const Histogram& other);
  // Forgets every recorded value; keeps the bucket array.
  void Reset();

  uint64_t count() const { return count_; }
  uint64_t sum() const { return sum_; }
  // 0 when empty.
  uint64_t min() const { return count_ == 0 ? 0 : min_; }
  uint64_t max() const { return max_; }
  // 0 when empty.
  double mean() const { return count_ == 0 ? 0.0 : static_cast<double>(sum_) / count_; }
  // Values recorded above max_value().
  uint64_t overflow_count() const { return counts_[num_buckets_]; }

  // The value at or below which `percentile` percent of the recorded values fall (nearest rank),
  // within the precision above. percentile in [0, 100]; 0 gives min(), 100 gives max(). 0 when
  // empty.
  uint64_t ValueAtPercentile(double percentile) const;

  // Calls fn(uint64_t upper_bound, uint64_t count) for each non-empty bucket in increasing
  // order, where upper_bound is the bucket's highest value (inclusive: every value counted there
  // is <= upper_bound). The overflow bucket is not visited; see overflow_count().
  template <typename Fn>
  void ForEachNonEmptyBucket(const Fn& fn) const {
    for (size_t i = 0; i < num_buckets_; i++) {
      if (counts_[i] != 0) fn(BucketUpperBound(i), counts_[i]);
    }
  }

  // The highest value bucketed with full precision (>= the max_value given at construction: it
  // is rounded up to the end of its bucket).
  uint64_t max_value() const { return overflow_start_ - 1; }

  // "count=5 mean=24.6 min=1 p50=20 p99=90 max=90", for logs and tests.
  std::string ToString() const;

  // The bucket layout, public so tests and tools can reason about precision.
  static constexpr int kSubBucketBits = 7;  // 128 linear buckets per power of two
  static size_t BucketIndex(uint64_t value) {
    // Values below 2^(kSubBucketBits+1) index themselves. Above, keep the top kSubBucketBits+1
    // bits: shift away the rest and add a per-magnitude offset so the indexes stay contiguous.
    const int magnitude = 63 - __builtin_clzll(value | 1);  // floor(log2(value))
    const int shift = magnitude > kSubBucketBits ? magnitude - kSubBucketBits : 0;
    return (static_cast<size_t>(shift) << kSubBucketBits) + (value >> shift);
  }
  static uint64_t BucketLowerBound(size_t index);
  static uint64_t BucketUpperBound(size_t index);

 private:
  size_t num_buckets_;       // finite buckets; counts_ has one more slot for the overflow
  uint64_t overflow_start_;  // lowest value that goes to the overflow slot
  std::unique_ptr<uint64_t[]> counts_;
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

}  // namespace rrpc
