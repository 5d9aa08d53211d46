// Tests of the proxy's per-method records: one per method whatever string object names it, from
// many threads at once and past the cache's slot count, each carrying the method's metrics and
// its header part as protobuf would encode it.
#include "rpc/core/remote_method.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::rpc {
namespace {

const Sockaddr kRemote = Sockaddr::Loopback(7000);

TEST(RemoteMethodCacheTest, SameRecordPerMethodFromAnyStringAndThread) {
  MetricRegistry registry;
  MessengerMetrics metrics(&registry, "m");
  RemoteMethodCache cache;
  std::vector<std::string> names;
  for (int i = 0; i < 20; i++) names.push_back("Method" + std::to_string(i));  // > slots
  std::vector<std::thread> threads;
  std::vector<std::vector<ClientMethodMetrics*>> seen(4);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 100; round++) {
        for (size_t i = 0; i < names.size(); i++) {
          scoped_refptr<RemoteMethod> by_object = cache.Get(&metrics, kRemote, "svc", names[i]);
          scoped_refptr<RemoteMethod> by_copy =
              cache.Get(&metrics, kRemote, "svc", std::string(names[i]));
          if (by_object->metrics() != by_copy->metrics() || by_object->method_name() != names[i] ||
              by_copy->method_name() != names[i]) {
            seen[t].push_back(nullptr);
          }
          if (round == 0) seen[t].push_back(by_object->metrics());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; t++) {
    ASSERT_EQ(seen[t].size(), names.size()) << "thread " << t << " saw different records";
    for (size_t i = 0; i < names.size(); i++) {
      EXPECT_EQ(seen[t][i], metrics.ClientMethod("svc", names[i]));
    }
  }
  EXPECT_EQ(std::set<ClientMethodMetrics*>(seen[0].begin(), seen[0].end()).size(), names.size());
  EXPECT_EQ(registry.num_entities(), 1u + names.size());
}

// A short-lived string at a cached string's address, holding another name, gets its own method.
TEST(RemoteMethodCacheTest, NameCheckedNotOnlyAddress) {
  RemoteMethodCache cache;
  std::string name = "Alpha";
  EXPECT_EQ(cache.Get(nullptr, kRemote, "svc", name)->method_name(), "Alpha");
  name = "Beta";  // same object, other name
  EXPECT_EQ(cache.Get(nullptr, kRemote, "svc", name)->method_name(), "Beta");
  name = "Alpha";
  EXPECT_EQ(cache.Get(nullptr, kRemote, "svc", name)->method_name(), "Alpha");
  name = "AlphaLongerThanEightBytes";
  EXPECT_EQ(cache.Get(nullptr, kRemote, "svc", name)->method_name(), "AlphaLongerThanEightBytes");
  name = "AlphaLongerThanEightBytez";
  EXPECT_EQ(cache.Get(nullptr, kRemote, "svc", name)->method_name(), "AlphaLongerThanEightBytez");
  EXPECT_EQ(cache.Get(nullptr, kRemote, "svc", name)->metrics(), nullptr);  // no messenger metrics
  // Every length class of the comparison: short, 4 to 7, whole words, a partial last word.
  for (const char* other : {"Ab", "Ac", "", "EightByt", "EightByu", "SixteenBytesLong",
                            "SixteenBytesLonh", "Seventeen bytes!!", "Seventeen bytes!?"}) {
    name = other;
    EXPECT_EQ(cache.Get(nullptr, kRemote, "svc", name)->method_name(), other);
  }
}

// The record outlives its cache (a call outlives its proxy), and its header part is the bytes
// protobuf writes for the same RemoteMethodPB field.
TEST(RemoteMethodTest, OutlivesCacheAndEncodesAsProtobuf) {
  scoped_refptr<RemoteMethod> method;
  const std::string service(200, 's');  // a two-byte length
  {
    RemoteMethodCache cache;
    method = cache.Get(nullptr, kRemote, service, "Echo");
  }
  RequestHeader pb;
  pb.set_call_id(0);
  pb.mutable_remote_method()->set_service_name(service);
  pb.mutable_remote_method()->set_method_name("Echo");
  const std::string expected = pb.SerializeAsString().substr(2);  // after call_id's tag and 0
  EXPECT_EQ(method->encoded().ToString(), expected);
  EXPECT_EQ(method->method_name(), "Echo");
  EXPECT_TRUE(method->remote() == kRemote);
}

}  // namespace
}  // namespace rrpc::rpc
