// metrics-bench: the cost of the hot-path metric updates (Counter::IncrementBy,
// HistogramMetric::Record, Histogram::Record), on one thread and on two threads updating the same
// metric, against a single shared atomic as the baseline that striping avoids.
//
//   build-metrics/src/util/metrics/metrics-bench [--benchmark_filter=Counter]
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

#include "util/histogram.h"
#include "util/metrics/counter.h"
#include "util/metrics/gauge.h"
#include "util/metrics/histogram_metric.h"

namespace rrpc {
namespace {

constexpr MetricPrototype kCalls =
    MetricPrototype::Counter("calls_total", "Calls", MetricUnit::kRequests, "Calls handled.");
constexpr MetricPrototype kInFlight =
    MetricPrototype::Gauge("calls_in_flight", "In flight", MetricUnit::kCalls, "Calls now.");
constexpr MetricPrototype kHandlerTime = MetricPrototype::Histogram(
    "handler_time_us", "Handler time", MetricUnit::kMicroseconds, "Time in the handler.");

// Latency-like values (log-normal around 400 us), precomputed so the loop measures Record only.
const std::vector<uint64_t>& Values() {
  static const std::vector<uint64_t> values = [] {
    std::mt19937_64 rng(1);
    std::lognormal_distribution<double> dist(6.0, 1.0);
    std::vector<uint64_t> v(4096);
    for (auto& x : v) x = static_cast<uint64_t>(dist(rng));
    return v;
  }();
  return values;
}

void BM_CounterIncrement(benchmark::State& state) {
  static Counter counter(&kCalls);
  for (auto _ : state) counter.Increment();
  benchmark::DoNotOptimize(counter.value());
}
BENCHMARK(BM_CounterIncrement)->Threads(1)->Threads(2);

// The baseline: every thread adds to one atomic, so two threads bounce its cache line.
void BM_SharedAtomicIncrement(benchmark::State& state) {
  static std::atomic<int64_t> shared{0};
  for (auto _ : state) shared.fetch_add(1, std::memory_order_relaxed);
  benchmark::DoNotOptimize(shared.load());
}
BENCHMARK(BM_SharedAtomicIncrement)->Threads(1)->Threads(2);

// Gauges are one shared atomic by design (Set needs one home): same cost as the baseline.
void BM_GaugeIncrement(benchmark::State& state) {
  static Gauge gauge(&kInFlight);
  for (auto _ : state) gauge.Increment();
  benchmark::DoNotOptimize(gauge.value());
}
BENCHMARK(BM_GaugeIncrement)->Threads(1)->Threads(2);

void BM_HistogramMetricRecord(benchmark::State& state) {
  static HistogramMetric histogram(&kHandlerTime);
  const std::vector<uint64_t>& values = Values();
  size_t i = state.thread_index() * 1000;
  for (auto _ : state) histogram.Record(values[i++ & 4095]);
  benchmark::DoNotOptimize(histogram.TotalCount());
}
BENCHMARK(BM_HistogramMetricRecord)->Threads(1)->Threads(2);

// The bare, single-threaded Histogram that rpc-bench keeps per thread.
void BM_HistogramRecord(benchmark::State& state) {
  Histogram histogram(60'000'000);
  const std::vector<uint64_t>& values = Values();
  size_t i = 0;
  for (auto _ : state) histogram.Record(values[i++ & 4095]);
  benchmark::DoNotOptimize(histogram.count());
}
BENCHMARK(BM_HistogramRecord)->Threads(1)->Threads(2);

}  // namespace
}  // namespace rrpc

BENCHMARK_MAIN();
