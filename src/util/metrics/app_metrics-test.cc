// Tests of the application metrics API: what an application creates appears in the Prometheus
// output under rrpc_app_<name>, promtool accepts it, and bad names or kinds are refused.
#include "rrpc/util/app_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "util/metrics/metric_registry.h"
#include "util/metrics/prometheus_writer.h"

namespace rrpc {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(AppMetricsTest, CounterGaugeAndHistogramAppearUnderTheirAppNames) {
  MetricRegistry registry;
  AppMetrics metrics(&registry, "store");
  AppCounter adds = metrics.Counter("adds_total", "Add calls applied.").value();
  AppGauge keys = metrics.Gauge("keys", "Keys held.").value();
  AppHistogram add_time =
      metrics.Histogram("add_time_us", "Time to apply one Add.", AppUnit::kMicroseconds).value();
  adds.Increment();
  adds.IncrementBy(2);
  keys.Set(10);
  keys.IncrementBy(-3);
  add_time.Record(40);
  EXPECT_EQ(3, adds.value());
  EXPECT_EQ(7, keys.value());
  EXPECT_EQ(1u, add_time.count());
  // Asked again: the same metric.
  EXPECT_EQ(3, metrics.Counter("adds_total", "Add calls applied.")->value());

  const std::string text = FormatPrometheus(registry.TakeSnapshot());
  EXPECT_TRUE(Contains(text, "# HELP rrpc_app_adds_total Add calls applied.")) << text;
  EXPECT_TRUE(Contains(text, "rrpc_app_adds_total{entity=\"app\",id=\"store\"} 3")) << text;
  EXPECT_TRUE(Contains(text, "rrpc_app_keys{entity=\"app\",id=\"store\"} 7")) << text;
  EXPECT_TRUE(Contains(text, "rrpc_app_add_time_seconds_count{entity=\"app\",id=\"store\"} 1"))
      << text;
}

TEST(AppMetricsTest, RefusesNamesThatAreNotSnakeCaseOrTakenByAnotherKind) {
  MetricRegistry registry;
  AppMetrics metrics(&registry, "store");
  EXPECT_TRUE(metrics.Counter("Adds-Total", "x").status().IsInvalidArgument());
  EXPECT_TRUE(metrics.Counter("", "x").status().IsInvalidArgument());
  ASSERT_TRUE(metrics.Gauge("depth", "Queue depth.").ok());
  const Status s = metrics.Counter("depth", "x").status();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(Contains(s.ToString(), "gauge")) << s.ToString();
}

TEST(AppMetricsTest, PromtoolAcceptsApplicationMetrics) {
  if (access("/usr/bin/promtool", X_OK) != 0 && system("promtool --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  }
  MetricRegistry registry;
  AppMetrics a(&registry, "store");
  AppMetrics b(&registry, "cache");
  a.Counter("requests_total", "Requests.", AppUnit::kRequests)->Increment();
  b.Counter("requests_total", "Requests.", AppUnit::kRequests)->IncrementBy(5);
  a.Gauge("held_bytes", "Bytes held.", AppUnit::kBytes)->Set(4096);
  a.Histogram("apply_time_us", "Apply time.")->Record(1500);
  const std::string path = testing::TempDir() + "app-metrics-" + std::to_string(getpid()) + ".prom";
  {
    std::ofstream out(path);
    out << FormatPrometheus(registry.TakeSnapshot());
  }
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output.append(buf, n);
  const int rc = pclose(p);
  unlink(path.c_str());
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(output, "");
}

}  // namespace
}  // namespace rrpc
