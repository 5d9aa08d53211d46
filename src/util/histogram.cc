#include "util/histogram.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace rrpc {

namespace {
// Past 2^62 the bucket arithmetic (upper bound + 1) would need more than 64 bits.
constexpr uint64_t kMaxTrackable = uint64_t{1} << 62;

// The shift that BucketIndex applied to the values of bucket `index`.
int ShiftOf(size_t index) {
  const size_t magnitude_group = index >> Histogram::kSubBucketBits;
  return magnitude_group > 1 ? static_cast<int>(magnitude_group - 1) : 0;
}
}  // namespace

uint64_t Histogram::BucketLowerBound(size_t index) {
  const int shift = ShiftOf(index);
  const uint64_t mantissa = index - (static_cast<size_t>(shift) << kSubBucketBits);
  return mantissa << shift;
}

uint64_t Histogram::BucketUpperBound(size_t index) {
  return BucketLowerBound(index) + ((uint64_t{1} << ShiftOf(index)) - 1);
}

Histogram::Histogram(uint64_t max_value) {
  CHECK_GE(max_value, 1u);
  CHECK_LE(max_value, kMaxTrackable);
  num_buckets_ = BucketIndex(max_value) + 1;
  overflow_start_ = BucketUpperBound(num_buckets_ - 1) + 1;
  counts_.reset(new uint64_t[num_buckets_ + 1]());
}

Histogram::Histogram(const Histogram& other)
    : num_buckets_(other.num_buckets_),
      overflow_start_(other.overflow_start_),
      counts_(new uint64_t[other.num_buckets_ + 1]),
      count_(other.count_),
      sum_(other.sum_),
      min_(other.min_),
      max_(other.max_) {
  memcpy(counts_.get(), other.counts_.get(), (num_buckets_ + 1) * sizeof(uint64_t));
}

Histogram& Histogram::operator=(const Histogram& other) {
  if (this != &other) *this = Histogram(other);
  return *this;
}

void Histogram::Merge(const Histogram& other) {
  if (other.count_ == 0) return;
  if (other.num_buckets_ == num_buckets_) {
    for (size_t i = 0; i <= num_buckets_; i++) counts_[i] += other.counts_[i];
  } else {
    // Different layouts: move each bucket's count to where its highest value lands here. The
    // overflow slot's values are only known to be above other's range, so use other's max.
    for (size_t i = 0; i < other.num_buckets_; i++) {
      if (other.counts_[i] == 0) continue;
      const uint64_t v = BucketUpperBound(i);
      counts_[BucketIndex(std::min(v, overflow_start_))] += other.counts_[i];
    }
    counts_[BucketIndex(std::min(other.max_, overflow_start_))] +=
        other.counts_[other.num_buckets_];
  }
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void Histogram::Reset() {
  memset(counts_.get(), 0, (num_buckets_ + 1) * sizeof(uint64_t));
  count_ = 0;
  sum_ = 0;
  min_ = UINT64_MAX;
  max_ = 0;
}

uint64_t Histogram::ValueAtPercentile(double percentile) const {
  if (count_ == 0) return 0;
  if (percentile <= 0) return min_;
  if (percentile >= 100) return max_;
  // Nearest rank: the smallest rank r with r >= p% of count. The tolerance keeps binary
  // rounding (99.9 is not exact) from pushing an exact product up to the next rank.
  const double exact = percentile * static_cast<double>(count_) / 100.0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(exact - exact * 1e-12));
  rank = std::clamp<uint64_t>(rank, 1, count_);

  uint64_t seen = 0;
  for (size_t i = 0; i < num_buckets_; i++) {
    seen += counts_[i];
    if (seen >= rank) return std::min(BucketUpperBound(i), max_);
  }
  return max_;  // the rank falls among the overflowed values
}

std::string Histogram::ToString() const {
  std::ostringstream out;
  out << "count=" << count_ << " mean=" << mean() << " min=" << min()
      << " p50=" << ValueAtPercentile(50) << " p99=" << ValueAtPercentile(99) << " max=" << max_;
  return out.str();
}

}  // namespace rrpc
