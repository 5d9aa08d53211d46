// Tests of the Prometheus writer: names, values and escaping read back by a small parser of the
// text format, and the output of a registry with every metric type checked by promtool.
#include "util/metrics/prometheus_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "util/metrics/metric_registry.h"

namespace rrpc {
namespace {

constexpr MetricPrototype kCalls =
    MetricPrototype::Counter("calls_total", "Calls", MetricUnit::kRequests, "Calls handled.");
constexpr MetricPrototype kSentBytes = MetricPrototype::Counter(
    "sent_bytes_total", "Bytes sent", MetricUnit::kBytes, "Bytes written to sockets.");
constexpr MetricPrototype kBusyTime = MetricPrototype::Counter(
    "busy_time_us", "Busy time", MetricUnit::kMicroseconds, "Time spent handling calls.");
constexpr MetricPrototype kConns = MetricPrototype::Gauge(
    "open_connections", "Connections", MetricUnit::kConnections, "Connections open now.");
constexpr MetricPrototype kMemory = MetricPrototype::Gauge(
    "memory", "Memory", MetricUnit::kBytes, "Memory in use.\nSecond line \\ backslash.");
constexpr MetricPrototype kUptime =
    MetricPrototype::Gauge("uptime_ms", "Uptime", MetricUnit::kMilliseconds, "Time since start.");
constexpr MetricPrototype kHandlerTime = MetricPrototype::Histogram(
    "handler_time_us", "Handler time", MetricUnit::kMicroseconds, "Time in the handler.");
constexpr MetricPrototype kPayload = MetricPrototype::Histogram(
    "request_size", "Request size", MetricUnit::kBytes, "Request body sizes.");

// One parsed sample line.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};

// What the parser read: HELP and TYPE per name, and the samples in order.
struct Exposition {
  std::map<std::string, std::string> help;
  std::map<std::string, std::string> type;
  std::vector<Sample> samples;

  // The value of the one sample with this name and these labels; "" when absent.
  std::string Value(const std::string& name, const std::map<std::string, std::string>& labels) {
    for (const Sample& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    return "";
  }
};

// Undoes the writer's escaping: \\, \n and (in label values) \".
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      i++;
      out.push_back(s[i] == 'n' ? '\n' : s[i]);
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// A strict reader of the subset of text format 0.0.4 the writer produces. Fails the test on any
// line it does not understand.
Exposition Parse(const std::string& text) {
  Exposition e;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    EXPECT_NE(eol, std::string::npos) << "last line lacks a newline";
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.rfind("# HELP ", 0) == 0) {
      const size_t sp = line.find(' ', 7);
      e.help[line.substr(7, sp - 7)] = Unescape(line.substr(sp + 1));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const size_t sp = line.find(' ', 7);
      e.type[line.substr(7, sp - 7)] = line.substr(sp + 1);
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') i++;
    s.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      i++;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        const std::string key = line.substr(i, eq - i);
        EXPECT_EQ(line[eq + 1], '"') << line;
        std::string raw;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; j++) {
          raw.push_back(line[j]);
          if (line[j] == '\\') raw.push_back(line[++j]);
        }
        s.labels[key] = Unescape(raw);
        i = j + 1;
        if (i < line.size() && line[i] == ',') i++;
      }
      i++;  // '}'
    }
    EXPECT_EQ(line[i], ' ') << line;
    s.value = line.substr(i + 1);
    EXPECT_FALSE(s.value.empty()) << line;
    e.samples.push_back(s);
  }
  return e;
}

std::map<std::string, std::string> Labels(const std::string& type, const std::string& id) {
  return {{"entity", type}, {"id", id}};
}

TEST(PrometheusWriterTest, NamesCarryPrometheusUnitSuffixes) {
  EXPECT_EQ(PrometheusMetricName(kCalls), "rrpc_calls_total");
  EXPECT_EQ(PrometheusMetricName(kSentBytes), "rrpc_sent_bytes_total");
  EXPECT_EQ(PrometheusMetricName(kBusyTime), "rrpc_busy_time_seconds_total");
  EXPECT_EQ(PrometheusMetricName(kConns), "rrpc_open_connections");
  EXPECT_EQ(PrometheusMetricName(kMemory), "rrpc_memory_bytes");
  EXPECT_EQ(PrometheusMetricName(kUptime), "rrpc_uptime_seconds");
  EXPECT_EQ(PrometheusMetricName(kHandlerTime), "rrpc_handler_time_seconds");
  EXPECT_EQ(PrometheusMetricName(kPayload), "rrpc_request_size_bytes");
  constexpr MetricPrototype kNoSuffix =
      MetricPrototype::Counter("calls", "Calls", MetricUnit::kCalls, "x");
  EXPECT_EQ(PrometheusMetricName(kNoSuffix), "rrpc_calls_total");
  constexpr MetricPrototype kNs =
      MetricPrototype::Histogram("queue_time_ns", "Queue", MetricUnit::kNanoseconds, "x");
  EXPECT_EQ(PrometheusMetricName(kNs), "rrpc_queue_time_seconds");
}

TEST(PrometheusWriterTest, ValuesReadBackThroughAParser) {
  MetricRegistry registry;
  auto echo = registry.FindOrCreateEntity("method", "rtest.EchoService.Echo");
  auto add = registry.FindOrCreateEntity("method", "rtest.CalcService.Add");
  auto server = registry.FindOrCreateEntity("server", "s1");
  echo->FindOrCreateCounter(&kCalls)->IncrementBy(12);
  add->FindOrCreateCounter(&kCalls)->IncrementBy(3);
  server->FindOrCreateGauge(&kConns)->Set(-4);
  server->FindOrCreateGauge(&kMemory)->Set(1 << 20);
  server->FindOrCreateCallbackGauge(&kUptime, [] { return int64_t{2500}; });
  server->FindOrCreateCounter(&kBusyTime)->IncrementBy(1'500'000);
  HistogramMetric* time = echo->FindOrCreateHistogram(&kHandlerTime);
  for (uint64_t v : {5, 5, 20, 300, 1000}) time->Record(v);

  Exposition e = Parse(FormatPrometheus(registry.TakeSnapshot()));

  EXPECT_EQ(e.type["rrpc_calls_total"], "counter");
  EXPECT_EQ(e.help["rrpc_calls_total"], "Calls handled.");
  EXPECT_EQ(e.Value("rrpc_calls_total", Labels("method", "rtest.EchoService.Echo")), "12");
  EXPECT_EQ(e.Value("rrpc_calls_total", Labels("method", "rtest.CalcService.Add")), "3");
  EXPECT_EQ(e.type["rrpc_open_connections"], "gauge");
  EXPECT_EQ(e.Value("rrpc_open_connections", Labels("server", "s1")), "-4");
  EXPECT_EQ(e.Value("rrpc_memory_bytes", Labels("server", "s1")), "1048576");
  EXPECT_EQ(e.help["rrpc_memory_bytes"], kMemory.description);
  EXPECT_DOUBLE_EQ(std::stod(e.Value("rrpc_uptime_seconds", Labels("server", "s1"))), 2.5);
  EXPECT_DOUBLE_EQ(std::stod(e.Value("rrpc_busy_time_seconds_total", Labels("server", "s1"))), 1.5);

  // The histogram: cumulative counts at the fixed 1-2-5 ladder from 1 us to 50 s (the default
  // 60 s range), +Inf, sum and count, all in seconds. 5 and 20 have fine buckets of their own
  // and count at their own boundaries; 300 (fine bucket 300..301) counts at 500; 1000 shares the
  // fine bucket 1000..1003, so it counts at 2000, never at a boundary below a possible value.
  EXPECT_EQ(e.type["rrpc_handler_time_seconds"], "histogram");
  std::vector<std::string> les;
  std::map<std::string, std::string> cumulative;
  for (const Sample& s : e.samples) {
    if (s.name != "rrpc_handler_time_seconds_bucket") continue;
    EXPECT_EQ(s.labels.at("entity"), "method");
    const std::string& le = s.labels.at("le");
    les.push_back(le);
    cumulative[le] = s.value;
  }
  // Bounds print in their shortest decimal form, free of binary rounding noise.
  EXPECT_EQ(les,
            (std::vector<std::string>{"1e-06", "2e-06", "5e-06", "1e-05", "2e-05", "5e-05", "1e-04",
                                      "2e-04", "5e-04", "0.001", "0.002", "0.005", "0.01",  "0.02",
                                      "0.05",  "0.1",   "0.2",   "0.5",   "1",     "2",     "5",
                                      "10",    "20",    "50",    "+Inf"}));
  const std::map<std::string, std::string> expected_counts = {
      {"1e-06", "0"}, {"2e-06", "0"}, {"5e-06", "2"}, {"1e-05", "2"}, {"2e-05", "3"},
      {"5e-05", "3"}, {"1e-04", "3"}, {"2e-04", "3"}, {"5e-04", "4"}, {"0.001", "4"},
      {"0.002", "5"}, {"50", "5"},    {"+Inf", "5"}};
  for (const auto& [le, count] : expected_counts) EXPECT_EQ(cumulative[le], count) << "le=" << le;
  const auto echo_labels = Labels("method", "rtest.EchoService.Echo");
  EXPECT_DOUBLE_EQ(std::stod(e.Value("rrpc_handler_time_seconds_sum", echo_labels)), 1330e-6);
  EXPECT_EQ(e.Value("rrpc_handler_time_seconds_count", echo_labels), "5");

  // One HELP/TYPE per name, and each name's samples form one contiguous group.
  std::vector<std::string> family_order;
  for (const Sample& s : e.samples) {
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string suf = suffix;
      if (e.type.count(family) == 0 && family.size() > suf.size() &&
          family.compare(family.size() - suf.size(), suf.size(), suf) == 0) {
        family.resize(family.size() - suf.size());
      }
    }
    ASSERT_EQ(e.type.count(family), 1u) << s.name;
    if (family_order.empty() || family_order.back() != family) family_order.push_back(family);
  }
  EXPECT_EQ(family_order.size(), e.type.size()) << "a family's samples are split";
}

TEST(PrometheusWriterTest, LabelValuesAreEscapedAndReadBack) {
  MetricRegistry registry;
  const std::string id = "a\"b\\c\nd \xE2\x82\xAC";
  registry.FindOrCreateEntity("client", id)->FindOrCreateCounter(&kCalls)->Increment();
  const std::string text = FormatPrometheus(registry.TakeSnapshot());
  EXPECT_NE(text.find(R"(id="a\"b\\c\nd )"), std::string::npos) << text;
  Exposition e = Parse(text);
  EXPECT_EQ(e.Value("rrpc_calls_total", Labels("client", id)), "1");
}

// The le values of one histogram's bucket lines, in order.
std::vector<std::string> BucketLes(const std::string& text, const std::string& bucket_name) {
  std::vector<std::string> les;
  for (const Sample& s : Parse(text).samples) {
    if (s.name == bucket_name) les.push_back(s.labels.at("le"));
  }
  return les;
}

TEST(PrometheusWriterTest, BucketBoundariesDoNotDependOnRecordedValues) {
  MetricRegistry empty_registry;
  empty_registry.FindOrCreateEntity("method", "m")->FindOrCreateHistogram(&kHandlerTime);
  MetricRegistry full_registry;
  HistogramMetric* h =
      full_registry.FindOrCreateEntity("method", "m")->FindOrCreateHistogram(&kHandlerTime);
  for (uint64_t v = 0; v < 100'000'000; v = v * 7 + 1) h->Record(v);

  const std::string empty_text = FormatPrometheus(empty_registry.TakeSnapshot());
  const std::vector<std::string> empty_les =
      BucketLes(empty_text, "rrpc_handler_time_seconds_bucket");
  EXPECT_EQ(empty_les.size(), 25u);  // 1 us ... 50 s, +Inf
  EXPECT_EQ(
      BucketLes(FormatPrometheus(full_registry.TakeSnapshot()), "rrpc_handler_time_seconds_bucket"),
      empty_les);
  // An empty histogram still lists every boundary, at zero.
  EXPECT_NE(
      empty_text.find("rrpc_handler_time_seconds_bucket{entity=\"method\",id=\"m\",le=\"1e-06\"}"
                      " 0\n"),
      std::string::npos)
      << empty_text;
  EXPECT_NE(empty_text.find("rrpc_handler_time_seconds_count{entity=\"method\",id=\"m\"} 0\n"),
            std::string::npos);
}

TEST(PrometheusWriterTest, LadderFollowsTheUnitAndRange) {
  // Tracks up to 1 ms.
  static constexpr MetricPrototype kQueueNs = MetricPrototype::Histogram(
      "queue_time_ns", "Queue time", MetricUnit::kNanoseconds, "x", 1'000'000);
  MetricRegistry registry;
  auto e = registry.FindOrCreateEntity("method", "m");
  e->FindOrCreateHistogram(&kQueueNs)->Record(0);
  e->FindOrCreateHistogram(&kPayload)->Record(4096);
  const std::string text = FormatPrometheus(registry.TakeSnapshot());

  // Nanoseconds up to 1 ms (rounded up to a bucket end): 1 ns ... 1 ms, in seconds.
  const std::vector<std::string> ns_les = BucketLes(text, "rrpc_queue_time_seconds_bucket");
  ASSERT_EQ(ns_les.size(), 20u) << text;
  EXPECT_EQ(ns_les.front(), "1e-09");
  EXPECT_EQ(ns_les[ns_les.size() - 2], "0.001");
  // Bytes up to the default 1 GiB: 1 ... 1e9 bytes, printed as integers.
  const std::vector<std::string> byte_les = BucketLes(text, "rrpc_request_size_bytes_bucket");
  ASSERT_EQ(byte_les.size(), 29u) << text;
  EXPECT_EQ(byte_les.front(), "1");
  EXPECT_EQ(byte_les[byte_les.size() - 2], "1000000000");

  Exposition parsed = Parse(text);
  auto le = [](const char* v) {
    auto labels = Labels("method", "m");
    labels["le"] = v;
    return labels;
  };
  // 0 ns counts at the first boundary; 4096 bytes at 5000, not at 2000.
  EXPECT_EQ(parsed.Value("rrpc_queue_time_seconds_bucket", le("1e-09")), "1");
  EXPECT_EQ(parsed.Value("rrpc_request_size_bytes_bucket", le("2000")), "0");
  EXPECT_EQ(parsed.Value("rrpc_request_size_bytes_bucket", le("5000")), "1");
}

TEST(PrometheusWriterTest, ValuesPastTheRangeCountOnlyInInf) {
  MetricRegistry registry;
  HistogramMetric* h =
      registry.FindOrCreateEntity("method", "m")->FindOrCreateHistogram(&kHandlerTime);
  h->Record(40'000'000);  // 40 s: within range, counts at le=50
  h->Record(70'000'000);  // 70 s: past the 60 s range; its exact value is not known
  Exposition e = Parse(FormatPrometheus(registry.TakeSnapshot()));
  auto labels = Labels("method", "m");
  labels["le"] = "20";
  EXPECT_EQ(e.Value("rrpc_handler_time_seconds_bucket", labels), "0");
  labels["le"] = "50";
  EXPECT_EQ(e.Value("rrpc_handler_time_seconds_bucket", labels), "1");
  labels["le"] = "+Inf";
  EXPECT_EQ(e.Value("rrpc_handler_time_seconds_bucket", labels), "2");
  EXPECT_DOUBLE_EQ(std::stod(e.Value("rrpc_handler_time_seconds_sum", Labels("method", "m"))), 110);
}

TEST(PrometheusWriterTest, PromtoolAcceptsEveryMetricType) {
  if (access("/usr/bin/promtool", X_OK) != 0 && system("promtool --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  }
  MetricRegistry registry;
  auto server = registry.FindOrCreateEntity("server", "s1", {{"version", "0.1"}});
  auto method = registry.FindOrCreateEntity("method", "rtest.EchoService.Echo");
  auto other = registry.FindOrCreateEntity("method", "rtest.Odd\"Name\\x");
  for (MetricEntity* e : {method.get(), other.get()}) {
    e->FindOrCreateCounter(&kCalls)->IncrementBy(7);
    HistogramMetric* h = e->FindOrCreateHistogram(&kHandlerTime);
    for (uint64_t v = 1; v < 100000; v = v * 3 + 1) h->Record(v);
    h->Record(100'000'000);  // past the tracked range: counts only in +Inf
    e->FindOrCreateHistogram(&kPayload)->Record(4096);
  }
  server->FindOrCreateCounter(&kSentBytes)->IncrementBy(1 << 30);
  server->FindOrCreateCounter(&kBusyTime)->IncrementBy(123);
  server->FindOrCreateGauge(&kConns)->Set(3);
  server->FindOrCreateGauge(&kMemory)->Set(1 << 20);
  server->FindOrCreateCallbackGauge(&kUptime, [] { return int64_t{99}; });
  method->FindOrCreateHistogram(&kHandlerTime);  // an entity with an empty one, too
  registry.FindOrCreateEntity("messenger", "m")->FindOrCreateHistogram(&kHandlerTime);

  const std::string path = testing::TempDir() + "metrics-" + std::to_string(getpid()) + ".prom";
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
