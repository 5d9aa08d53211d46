// Tests of the JSON writer: the exact schema the dashboard reads, and correct escaping.
#include "util/metrics/json_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "util/metrics/metric_registry.h"

namespace rrpc {
namespace {

constexpr MetricPrototype kCalls =
    MetricPrototype::Counter("calls_total", "Calls", MetricUnit::kRequests, "Calls handled.");
constexpr MetricPrototype kConns = MetricPrototype::Gauge(
    "open_connections", "Connections", MetricUnit::kConnections, "Connections open now.");
constexpr MetricPrototype kHandlerTime = MetricPrototype::Histogram(
    "handler_time_us", "Handler time", MetricUnit::kMicroseconds, "Time in the handler.");

std::string Json(std::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

TEST(JsonWriterTest, FormatsTheDashboardSchemaExactly) {
  RegistrySnapshot snap;
  snap.timestamp_ms = 1700000000123;
  EntitySnapshot& method = snap.entities.emplace_back();
  method.type = "method";
  method.id = "rtest.EchoService.Echo";
  method.attributes = {{"k", "v"}};
  MetricSnapshot& calls = method.metrics.emplace_back();
  calls.prototype = &kCalls;
  calls.value = 12;
  MetricSnapshot& time = method.metrics.emplace_back();
  time.prototype = &kHandlerTime;
  time.histogram = std::make_unique<Histogram>(60'000'000);
  for (uint64_t v : {1, 2, 20, 30, 90}) time.histogram->Record(v);
  EntitySnapshot& server = snap.entities.emplace_back();
  server.type = "server";
  server.id = "s1";
  MetricSnapshot& conns = server.metrics.emplace_back();
  conns.prototype = &kConns;
  conns.value = -2;

  EXPECT_EQ(FormatJson(snap),
            R"({"timestamp_ms":1700000000123,"entities":[)"
            R"({"type":"method","id":"rtest.EchoService.Echo","attributes":{"k":"v"},"metrics":[)"
            R"({"name":"calls_total","type":"counter","unit":"requests","help":"Calls handled.",)"
            R"("value":12},)"
            R"({"name":"handler_time_us","type":"histogram","unit":"microseconds",)"
            R"("help":"Time in the handler.","count":5,"sum":143,"min":1,"max":90,"mean":28.6,)"
            R"("p50":20,"p75":30,"p95":90,"p99":90,"p999":90}]},)"
            R"({"type":"server","id":"s1","attributes":{},"metrics":[)"
            R"({"name":"open_connections","type":"gauge","unit":"connections",)"
            R"("help":"Connections open now.","value":-2}]}]})");
}

TEST(JsonWriterTest, EmptyRegistry) {
  RegistrySnapshot snap;
  snap.timestamp_ms = 5;
  EXPECT_EQ(FormatJson(snap), R"({"timestamp_ms":5,"entities":[]})");
}

TEST(JsonWriterTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(Json("plain"), R"("plain")");
  EXPECT_EQ(Json("a\"b\\c/d"), R"("a\"b\\c/d")");
  EXPECT_EQ(Json("\n\r\t\b\f"), R"("\n\r\t\b\f")");
  EXPECT_EQ(Json(std::string_view("\x01\x1f\0", 3)), R"("\u0001\u001f\u0000")");
  EXPECT_EQ(Json("\x7f"), "\"\x7f\"");  // DEL needs no escape in JSON
}

TEST(JsonWriterTest, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(Json("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(Json(std::string("a\xFF") + "b"), "\"a" + fffd + "b\"");             // never valid
  EXPECT_EQ(Json("\xC3"), "\"" + fffd + "\"");                                   // truncated
  EXPECT_EQ(Json("\xC0\xAF"), "\"" + fffd + fffd + "\"");                        // overlong '/'
  EXPECT_EQ(Json("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");             // a surrogate
  EXPECT_EQ(Json("\xF4\x90\x80\x80"), "\"" + fffd + fffd + fffd + fffd + "\"");  // > U+10FFFF
  EXPECT_EQ(Json("\x80"), "\"" + fffd + "\"");  // stray continuation
}

TEST(JsonWriterTest, PythonParsesOutputWithHostileStrings) {
  if (system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 not installed";
  MetricRegistry registry;
  auto e = registry.FindOrCreateEntity("method", "we\"ird\\id\n\x01\xFF\xE2\x82\xAC",
                                       {{"key\t", "val\"ue"}});
  e->FindOrCreateCounter(&kCalls)->IncrementBy(3);
  e->FindOrCreateHistogram(&kHandlerTime)->Record(7);
  const std::string path = testing::TempDir() + "metrics-" + std::to_string(getpid()) + ".json";
  {
    std::ofstream out(path);
    out << FormatJson(registry.TakeSnapshot());
  }
  const std::string check =
      "python3 -c 'import json,sys\n"
      "d = json.load(open(sys.argv[1], encoding=\"utf-8\"))\n"
      "e = d[\"entities\"][0]\n"
      "assert e[\"id\"] == \"we\\\"ird\\\\id\\n\\x01\\ufffd\\u20ac\", repr(e[\"id\"])\n"
      "assert e[\"attributes\"] == {\"key\\t\": \"val\\\"ue\"}\n"
      "assert e[\"metrics\"][0][\"value\"] == 3\n"
      "assert e[\"metrics\"][1][\"p99\"] == 7\n"
      "' " +
      path;
  EXPECT_EQ(system(check.c_str()), 0);
  unlink(path.c_str());
}

}  // namespace
}  // namespace rrpc
