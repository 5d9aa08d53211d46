// LatencyHistogram: fixed-size log-linear histogram of nanosecond latencies for the benchmark
// peers. 64 sub-buckets per power of two keep the relative error under 1.6% (the midpoint is
// reported, so under 0.8%), with no allocation per sample and ~30 KiB per instance, so recording
// millions of samples does not inflate the peak RSS the peers report.
//
// Not thread-safe: each client thread records into its own instance; the runner merges them after
// the threads have joined.
#pragma once

#include <array>
#include <cstdint>

namespace rrpc {
namespace bench {

class LatencyHistogram {
 public:
  LatencyHistogram();

  void Record(uint64_t nanos);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }

  // The value at percentile `pct` (0..100] in nanoseconds: the midpoint of the bucket that holds
  // the sample of rank ceil(pct/100 * count). 0 when empty.
  double ValueAtPercentile(double pct) const;

 private:
  static constexpr int kSubBits = 6;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBits;
  // Values below 2 * kSubBuckets are stored exactly; above, each power of two 2^m (m >= 7) gets
  // kSubBuckets buckets. The largest index is for m = 63.
  static constexpr int kNumBuckets = (63 - kSubBits + 2) * kSubBuckets;

  static int BucketFor(uint64_t nanos);
  static double BucketMidpoint(int index);

  std::array<uint64_t, kNumBuckets> buckets_;
  uint64_t count_ = 0;
};

}  // namespace bench
}  // namespace rrpc
