// Tests of the metric types, entities and the registry: exact values after concurrent updates.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "util/histogram.h"
#include "util/metrics/counter.h"
#include "util/metrics/gauge.h"
#include "util/metrics/histogram_metric.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/metric_registry.h"
#include "util/metrics/striping.h"

namespace rrpc {
namespace {

constexpr MetricPrototype kCalls =
    MetricPrototype::Counter("calls_total", "Calls", MetricUnit::kRequests, "Calls handled.");
constexpr MetricPrototype kBytes = MetricPrototype::Counter(
    "received_bytes_total", "Bytes received", MetricUnit::kBytes, "Bytes read from sockets.");
constexpr MetricPrototype kInFlight = MetricPrototype::Gauge(
    "calls_in_flight", "Calls in flight", MetricUnit::kCalls, "Calls being handled now.");
constexpr MetricPrototype kQueueLength = MetricPrototype::Gauge(
    "queue_length", "Queue length", MetricUnit::kEntries, "Calls waiting for a worker.");
constexpr MetricPrototype kHandlerTime = MetricPrototype::Histogram(
    "handler_time_us", "Handler time", MetricUnit::kMicroseconds, "Time in the handler.");

// Runs fn(thread_index) on `n` threads at once and joins them.
template <typename Fn>
void RunThreads(int n, const Fn& fn) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; t++) threads.emplace_back([&fn, t] { fn(t); });
  for (auto& th : threads) th.join();
}

TEST(StripingTest, StripeCountIsAPowerOfTwoAndThreadsStayOnTheirStripe) {
  const int n = metrics_internal::NumStripes();
  EXPECT_GE(n, 4);
  EXPECT_LE(n, 64);
  EXPECT_EQ(n & (n - 1), 0);
  const int mine = metrics_internal::ThisThreadStripe();
  EXPECT_GE(mine, 0);
  EXPECT_LT(mine, n);
  EXPECT_EQ(metrics_internal::ThisThreadStripe(), mine);
  // The next n threads to ask take distinct stripes (round-robin).
  std::vector<int> stripes(n);
  RunThreads(n, [&](int t) { stripes[t] = metrics_internal::ThisThreadStripe(); });
  std::sort(stripes.begin(), stripes.end());
  EXPECT_EQ(std::unique(stripes.begin(), stripes.end()), stripes.end());
}

TEST(CounterTest, ConcurrentIncrementsAddUpExactly) {
  Counter counter(&kCalls);
  // More threads than stripes, so some share one.
  const int threads = metrics_internal::NumStripes() * 2 + 1;
  constexpr int kPerThread = 20000;
  RunThreads(threads, [&](int t) {
    for (int i = 0; i < kPerThread; i++) counter.IncrementBy(t + 1);
  });
  // Sum over t of (t + 1) * kPerThread.
  EXPECT_EQ(counter.value(), int64_t{kPerThread} * threads * (threads + 1) / 2);
}

TEST(CounterTest, ReadsDuringUpdatesNeverGoBackwards) {
  Counter counter(&kCalls);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    int64_t last = 0;
    while (!done.load()) {
      const int64_t now = counter.value();
      ASSERT_GE(now, last);
      last = now;
    }
  });
  RunThreads(3, [&](int) {
    for (int i = 0; i < 50000; i++) counter.Increment();
  });
  done = true;
  reader.join();
  EXPECT_EQ(counter.value(), 150000);
}

TEST(GaugeTest, SetIncrementDecrement) {
  Gauge gauge(&kInFlight);
  gauge.Set(10);
  RunThreads(4, [&](int t) {
    for (int i = 0; i < 10000; i++) {
      gauge.Increment();
      if (i % 2 == 0) gauge.Decrement();
    }
    gauge.DecrementBy(t);
  });
  EXPECT_EQ(gauge.value(), 10 + 4 * 5000 - (0 + 1 + 2 + 3));
  gauge.Set(-3);
  EXPECT_EQ(gauge.value(), -3);
}

TEST(CallbackGaugeTest, ComputesOnReadAndDetaches) {
  int64_t length = 7;
  CallbackGauge gauge(&kQueueLength, [&length] { return length; });
  EXPECT_EQ(gauge.value(), 7);
  length = 9;
  EXPECT_EQ(gauge.value(), 9);
  gauge.DetachToLastValue();
  length = 100;
  EXPECT_EQ(gauge.value(), 9);
  gauge.SetCallback([] { return int64_t{5}; });
  EXPECT_EQ(gauge.value(), 5);
  gauge.DetachToConstant(-1);
  EXPECT_EQ(gauge.value(), -1);
}

TEST(HistogramMetricTest, ConcurrentRecordsMergeToTheSingleThreadedResult) {
  HistogramMetric metric(&kHandlerTime);
  Histogram expected(kHandlerTime.EffectiveHistogramMax());
  const int threads = HistogramMetric::kMaxStripes + 3;  // some stripes are shared
  // Each thread records its own deterministic values; the merged result must equal recording
  // them all on one thread, bucket for bucket.
  auto value_of = [](int t, int i) {
    return static_cast<uint64_t>((i * 7919 + t * 104729) % 2000000);
  };
  constexpr int kPerThread = 20000;
  for (int t = 0; t < threads; t++) {
    for (int i = 0; i < kPerThread; i++) expected.Record(value_of(t, i));
  }
  RunThreads(threads, [&](int t) {
    for (int i = 0; i < kPerThread; i++) metric.Record(value_of(t, i));
  });

  EXPECT_EQ(metric.TotalCount(), uint64_t{kPerThread} * threads);
  const Histogram merged = metric.Snapshot();
  EXPECT_EQ(merged.count(), expected.count());
  EXPECT_EQ(merged.sum(), expected.sum());
  EXPECT_EQ(merged.min(), expected.min());
  EXPECT_EQ(merged.max(), expected.max());
  std::vector<std::pair<uint64_t, uint64_t>> got, want;
  merged.ForEachNonEmptyBucket([&](uint64_t ub, uint64_t n) { got.emplace_back(ub, n); });
  expected.ForEachNonEmptyBucket([&](uint64_t ub, uint64_t n) { want.emplace_back(ub, n); });
  EXPECT_EQ(got, want);
  for (double p : {50.0, 75.0, 95.0, 99.0, 99.9}) {
    EXPECT_EQ(merged.ValueAtPercentile(p), expected.ValueAtPercentile(p)) << p;
  }
}

TEST(HistogramMetricTest, EmptyUntilRecorded) {
  HistogramMetric metric(&kHandlerTime);
  EXPECT_EQ(metric.TotalCount(), 0u);
  EXPECT_EQ(metric.Snapshot().count(), 0u);
  metric.Record(42);
  EXPECT_EQ(metric.Snapshot().ValueAtPercentile(50), 42u);
}

TEST(MetricEntityTest, FindOrCreateReturnsTheSameInstance) {
  MetricRegistry registry;
  scoped_refptr<MetricEntity> entity = registry.FindOrCreateEntity("method", "svc.Echo");
  Counter* calls = entity->FindOrCreateCounter(&kCalls);
  EXPECT_EQ(entity->FindOrCreateCounter(&kCalls), calls);
  HistogramMetric* time = entity->FindOrCreateHistogram(&kHandlerTime);
  EXPECT_EQ(entity->FindOrCreateHistogram(&kHandlerTime), time);
  Gauge* in_flight = entity->FindOrCreateGauge(&kInFlight);
  EXPECT_EQ(entity->FindOrCreateGauge(&kInFlight), in_flight);

  // A second prototype object with the same name is the same metric.
  constexpr MetricPrototype kCallsAgain = kCalls;
  EXPECT_EQ(entity->FindOrCreateCounter(&kCallsAgain), calls);
}

TEST(MetricEntityTest, CallbackGaugeTakesTheNewestCallback) {
  MetricRegistry registry;
  auto entity = registry.FindOrCreateEntity("server", "s1");
  CallbackGauge* g = entity->FindOrCreateCallbackGauge(&kQueueLength, [] { return int64_t{1}; });
  EXPECT_EQ(entity->FindOrCreateCallbackGauge(&kQueueLength, [] { return int64_t{2}; }), g);
  EXPECT_EQ(g->value(), 2);
}

TEST(MetricEntityDeathTest, SameNameAsAnotherKindIsAnError) {
  MetricRegistry registry;
  auto entity = registry.FindOrCreateEntity("server", "s1");
  entity->FindOrCreateGauge(&kQueueLength);
  EXPECT_DEATH(entity->FindOrCreateCallbackGauge(&kQueueLength, [] { return int64_t{0}; }),
               "another kind");
  constexpr MetricPrototype kBadName =
      MetricPrototype::Counter("Bad-Name", "x", MetricUnit::kUnits, "x");
  EXPECT_DEATH(entity->FindOrCreateCounter(&kBadName), "snake_case");
}

TEST(MetricRegistryTest, EntitiesAreKeyedByTypeAndIdAndKeepAttributes) {
  MetricRegistry registry;
  auto a = registry.FindOrCreateEntity("method", "svc.Echo", {{"service", "svc"}});
  auto b = registry.FindOrCreateEntity("method", "svc.Echo", {{"method", "Echo"}});
  auto c = registry.FindOrCreateEntity("service", "svc.Echo");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(registry.num_entities(), 2u);
  EXPECT_EQ(a->attributes(), (MetricEntity::Attributes{{"method", "Echo"}, {"service", "svc"}}));
  EXPECT_EQ(registry.FindEntity("method", "svc.Echo"), a);
  EXPECT_FALSE(registry.FindEntity("method", "nope"));
}

TEST(MetricRegistryTest, SnapshotIsSortedAndComplete) {
  MetricRegistry registry;
  auto method = registry.FindOrCreateEntity("method", "svc.Echo");
  auto server = registry.FindOrCreateEntity("server", "s1");
  method->FindOrCreateCounter(&kCalls)->IncrementBy(12);
  method->FindOrCreateHistogram(&kHandlerTime)->Record(20);
  server->FindOrCreateCounter(&kBytes)->IncrementBy(4096);
  server->FindOrCreateCallbackGauge(&kQueueLength, [] { return int64_t{3}; });

  const RegistrySnapshot snap = registry.TakeSnapshot();
  EXPECT_GT(snap.timestamp_ms, 1'600'000'000'000);  // after 2020: a wall-clock time
  ASSERT_EQ(snap.entities.size(), 2u);
  EXPECT_EQ(snap.entities[0].type, "method");
  EXPECT_EQ(snap.entities[1].type, "server");
  const auto& m = snap.entities[0].metrics;
  ASSERT_EQ(m.size(), 2u);
  EXPECT_STREQ(m[0].prototype->name, "calls_total");
  EXPECT_EQ(m[0].value, 12);
  EXPECT_STREQ(m[1].prototype->name, "handler_time_us");
  ASSERT_NE(m[1].histogram, nullptr);
  EXPECT_EQ(m[1].histogram->count(), 1u);
  const auto& s = snap.entities[1].metrics;
  ASSERT_EQ(s.size(), 2u);
  EXPECT_STREQ(s[0].prototype->name, "queue_length");
  EXPECT_EQ(s[0].value, 3);
  EXPECT_EQ(s[1].value, 4096);
}

TEST(MetricRegistryTest, UnregisteredEntityLeavesOutputButStaysUsable) {
  MetricRegistry registry;
  auto client = registry.FindOrCreateEntity("client", "c1");
  Counter* calls = client->FindOrCreateCounter(&kCalls);
  registry.Unregister(client.get());
  EXPECT_EQ(registry.num_entities(), 0u);
  EXPECT_TRUE(registry.TakeSnapshot().entities.empty());
  calls->Increment();  // still valid: we hold the entity
  EXPECT_EQ(calls->value(), 1);
  registry.Unregister(client.get());  // twice is harmless
  // A new entity with the same key is a fresh one.
  auto again = registry.FindOrCreateEntity("client", "c1");
  EXPECT_NE(again, client);
}

TEST(MetricRegistryTest, SnapshotsRunSafelyAlongsideUpdatesAndDetaches) {
  // Mostly for TSAN: writers, a snapshot reader and a detaching owner all at once.
  MetricRegistry registry;
  auto entity = registry.FindOrCreateEntity("method", "svc.Echo");
  Counter* calls = entity->FindOrCreateCounter(&kCalls);
  HistogramMetric* time = entity->FindOrCreateHistogram(&kHandlerTime);
  auto queue = std::make_unique<std::atomic<int64_t>>(0);
  CallbackGauge* length =
      entity->FindOrCreateCallbackGauge(&kQueueLength, [q = queue.get()] { return q->load(); });

  std::atomic<int> writers_left{2};
  std::thread reader([&] {
    int64_t last_calls = 0;
    for (int i = 0; i < 10000 && writers_left.load() > 0; i++) {
      RegistrySnapshot snap = registry.TakeSnapshot();
      ASSERT_EQ(snap.entities.size(), 1u);
      const int64_t c = snap.entities[0].metrics[0].value;
      ASSERT_GE(c, last_calls);
      last_calls = c;
    }
  });
  RunThreads(2, [&](int t) {
    for (int i = 0; i < 20000; i++) {
      calls->Increment();
      time->Record(i);
      queue->fetch_add(1);
      if (t == 1 && i == 10000) {
        length->DetachToLastValue();
      }
    }
    writers_left--;
  });
  reader.join();
  queue.reset();  // the callback was detached, so this is safe
  EXPECT_EQ(calls->value(), 40000);
  EXPECT_EQ(time->TotalCount(), 40000u);
  EXPECT_GT(length->value(), 0);
}

}  // namespace
}  // namespace rrpc
