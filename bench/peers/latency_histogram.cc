#include "bench/peers/latency_histogram.h"

#include <cmath>

namespace rrpc {
namespace bench {

LatencyHistogram::LatencyHistogram() { buckets_.fill(0); }

int LatencyHistogram::BucketFor(uint64_t nanos) {
  if (nanos < 2 * kSubBuckets) return static_cast<int>(nanos);
  const int msb = 63 - __builtin_clzll(nanos);
  const int shift = msb - kSubBits;     // >= 1 here
  const uint64_t top = nanos >> shift;  // in [kSubBuckets, 2 * kSubBuckets)
  return static_cast<int>(shift * kSubBuckets + top);
}

double LatencyHistogram::BucketMidpoint(int index) {
  if (index < static_cast<int>(2 * kSubBuckets)) return index;
  const int shift = index / static_cast<int>(kSubBuckets) - 1;
  const uint64_t top = index % kSubBuckets + kSubBuckets;
  const double low = std::ldexp(static_cast<double>(top), shift);
  const double width = std::ldexp(1.0, shift);
  return low + (width - 1) / 2;
}

void LatencyHistogram::Record(uint64_t nanos) {
  ++buckets_[BucketFor(nanos)];
  ++count_;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (int i = 0; i < kNumBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
}

double LatencyHistogram::ValueAtPercentile(double pct) const {
  if (count_ == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(pct / 100.0 * static_cast<double>(count_)));
  if (rank < 1) rank = 1;
  if (rank > count_) rank = count_;
  uint64_t seen = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) return BucketMidpoint(i);
  }
  return BucketMidpoint(kNumBuckets - 1);
}

}  // namespace bench
}  // namespace rrpc
