#include "util/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace rrpc {
namespace {

// The documented precision: a reported percentile is never below the true one and at most
// 1/128 above it (values below 256 are exact).
void ExpectWithinPrecision(uint64_t truth, uint64_t reported) {
  EXPECT_GE(reported, truth);
  EXPECT_LE(static_cast<double>(reported), static_cast<double>(truth) * (1.0 + 1.0 / 128) + 1e-9)
      << "truth=" << truth << " reported=" << reported;
}

// Nearest-rank percentile of sorted values: the reference the histogram approximates.
uint64_t ExactPercentile(const std::vector<uint64_t>& sorted, double p) {
  const double exact = p * static_cast<double>(sorted.size()) / 100.0;
  size_t rank = static_cast<size_t>(std::ceil(exact - exact * 1e-12));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

TEST(HistogramTest, BucketsAreContiguousAndNarrow) {
  // Every value maps to a bucket whose bounds contain it, bucket indexes never skip, and a
  // bucket's width is at most 1/128 of its lower bound past the exact range.
  size_t last_index = 0;
  for (uint64_t v = 0; v < (1u << 20); v++) {
    const size_t i = Histogram::BucketIndex(v);
    ASSERT_LE(Histogram::BucketLowerBound(i), v);
    ASSERT_GE(Histogram::BucketUpperBound(i), v);
    ASSERT_TRUE(i == last_index || i == last_index + 1) << v;
    last_index = i;
  }
  for (size_t i = 256; i < Histogram::BucketIndex(uint64_t{1} << 62); i++) {
    const uint64_t lo = Histogram::BucketLowerBound(i);
    const uint64_t hi = Histogram::BucketUpperBound(i);
    ASSERT_EQ(Histogram::BucketIndex(lo), i);
    ASSERT_EQ(Histogram::BucketIndex(hi), i);
    ASSERT_EQ(Histogram::BucketIndex(hi + 1), i + 1);
    ASSERT_LE((hi - lo + 1) * 128, lo);
  }
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h(1000);
  for (uint64_t v = 1; v <= 100; v++) h.Record(v);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.sum(), 5050u);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 100u);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
  EXPECT_EQ(h.ValueAtPercentile(0), 1u);
  EXPECT_EQ(h.ValueAtPercentile(50), 50u);
  EXPECT_EQ(h.ValueAtPercentile(75), 75u);
  EXPECT_EQ(h.ValueAtPercentile(95), 95u);
  EXPECT_EQ(h.ValueAtPercentile(99), 99u);
  EXPECT_EQ(h.ValueAtPercentile(99.9), 100u);
  EXPECT_EQ(h.ValueAtPercentile(100), 100u);
}

TEST(HistogramTest, EmptyHistogramReportsZeros) {
  Histogram h(1000);
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
  EXPECT_EQ(h.ValueAtPercentile(50), 0u);
  int visited = 0;
  h.ForEachNonEmptyBucket([&](uint64_t, uint64_t) { visited++; });
  EXPECT_EQ(visited, 0);
}

TEST(HistogramTest, PercentileOfExactRankIsNotPushedUpByRounding) {
  // 99.9% of 1000 is rank 999 exactly, though 99.9 has no exact binary form. 999 and 1000 sit
  // in different buckets ([996, 999] and [1000, 1003]), so an off-by-one rank would show.
  Histogram h(10000);
  for (uint64_t v = 1; v <= 1000; v++) h.Record(v);
  EXPECT_EQ(h.ValueAtPercentile(99.9), 999u);
  EXPECT_EQ(h.ValueAtPercentile(99.95), 1000u);
}

TEST(HistogramTest, UniformDistributionPercentilesWithinPrecision) {
  Histogram h(60'000'000);
  std::vector<uint64_t> values;
  for (uint64_t v = 1; v <= 100000; v++) {
    values.push_back(v * 7);
    h.Record(v * 7);
  }
  for (double p : {50.0, 75.0, 95.0, 99.0, 99.9}) {
    SCOPED_TRACE(p);
    ExpectWithinPrecision(ExactPercentile(values, p), h.ValueAtPercentile(p));
  }
}

TEST(HistogramTest, LogNormalDistributionPercentilesWithinPrecision) {
  std::mt19937_64 rng(42);  // fixed seed: deterministic
  std::lognormal_distribution<double> dist(6.0, 1.5);
  Histogram h(60'000'000);
  std::vector<uint64_t> values;
  for (int i = 0; i < 200000; i++) {
    const uint64_t v = std::min<uint64_t>(static_cast<uint64_t>(dist(rng)), 60'000'000);
    values.push_back(v);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  for (double p : {50.0, 75.0, 95.0, 99.0, 99.9}) {
    SCOPED_TRACE(p);
    ExpectWithinPrecision(ExactPercentile(values, p), h.ValueAtPercentile(p));
  }
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
  EXPECT_EQ(h.ValueAtPercentile(100), values.back());
}

TEST(HistogramTest, BucketIterationCoversEveryFiniteValueInOrder) {
  Histogram h(1'000'000);
  h.Record(3);
  h.Record(3);
  h.Record(1000);
  h.Record(999'999);
  std::vector<std::pair<uint64_t, uint64_t>> buckets;
  h.ForEachNonEmptyBucket([&](uint64_t upper, uint64_t n) { buckets.emplace_back(upper, n); });
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], std::make_pair(uint64_t{3}, uint64_t{2}));
  EXPECT_GE(buckets[1].first, 1000u);
  EXPECT_LT(buckets[1].first, 1008u);
  EXPECT_EQ(buckets[1].second, 1u);
  EXPECT_GE(buckets[2].first, 999'999u);
  EXPECT_EQ(buckets[2].second, 1u);
}

TEST(HistogramTest, ValuesAboveMaxGoToOverflowOnly) {
  Histogram h(1000);
  EXPECT_GE(h.max_value(), 1000u);
  h.Record(10);
  h.Record(5'000'000);
  EXPECT_EQ(h.count(), 2u);
  EXPECT_EQ(h.overflow_count(), 1u);
  EXPECT_EQ(h.sum(), 5'000'010u);
  EXPECT_EQ(h.max(), 5'000'000u);
  EXPECT_EQ(h.ValueAtPercentile(99), 5'000'000u);
  uint64_t finite = 0;
  h.ForEachNonEmptyBucket([&](uint64_t, uint64_t n) { finite += n; });
  EXPECT_EQ(finite, 1u);
}

TEST(HistogramTest, MergeAddsEverything) {
  Histogram a(1'000'000), b(1'000'000);
  for (uint64_t v = 1; v <= 500; v++) a.Record(v);
  for (uint64_t v = 501; v <= 1000; v++) b.Record(v);
  a.Merge(b);
  EXPECT_EQ(a.count(), 1000u);
  EXPECT_EQ(a.sum(), 500500u);
  EXPECT_EQ(a.min(), 1u);
  EXPECT_EQ(a.max(), 1000u);
  ExpectWithinPrecision(500, a.ValueAtPercentile(50));
  ExpectWithinPrecision(990, a.ValueAtPercentile(99));
}

TEST(HistogramTest, MergeAcrossLayoutsKeepsCountsAndBounds) {
  Histogram small(1000), big(1'000'000);
  small.Record(7);
  small.Record(900);
  small.Record(50'000);  // overflow in `small`
  big.Merge(small);
  EXPECT_EQ(big.count(), 3u);
  EXPECT_EQ(big.overflow_count(), 0u);
  EXPECT_EQ(big.max(), 50'000u);
  EXPECT_EQ(big.ValueAtPercentile(100), 50'000u);
  ExpectWithinPrecision(900, big.ValueAtPercentile(60));

  Histogram tiny(100);
  tiny.Merge(small);
  EXPECT_EQ(tiny.count(), 3u);
  EXPECT_EQ(tiny.overflow_count(), 2u);
}

TEST(HistogramTest, CopyAndResetAreIndependent) {
  Histogram a(1000);
  a.Record(5);
  Histogram b = a;
  b.Record(6);
  a.Reset();
  EXPECT_EQ(a.count(), 0u);
  EXPECT_EQ(a.min(), 0u);
  EXPECT_EQ(b.count(), 2u);
  EXPECT_EQ(b.min(), 5u);
  EXPECT_EQ(b.max(), 6u);
}

TEST(HistogramTest, HugeValuesNearTheLimit) {
  const uint64_t limit = uint64_t{1} << 62;
  Histogram h(limit);
  h.Record(limit);
  h.Record(0);
  EXPECT_EQ(h.overflow_count(), 0u);
  EXPECT_EQ(h.ValueAtPercentile(100), limit);
  EXPECT_EQ(h.ValueAtPercentile(1), 0u);
}

}  // namespace
}  // namespace rrpc
