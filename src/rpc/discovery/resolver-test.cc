#include "rrpc/rpc/discovery/resolver.h"

#include <gtest/gtest.h>

#include <vector>

namespace rrpc::rpc {
namespace {

std::vector<Sockaddr> FirstSet(Resolver* resolver) {
  std::vector<Sockaddr> got;
  EXPECT_TRUE(resolver
                  ->Start([&](const Result<std::vector<Sockaddr>>& update) {
                    ASSERT_TRUE(update.ok()) << update.status().ToString();
                    got = *update;
                  })
                  .ok());
  resolver->Stop();
  return got;
}

TEST(ResolverTest, ListTargetGivesItsAddressesInOrder) {
  auto resolver = NewResolver("list://127.0.0.1:7001,127.0.0.2:7002");
  ASSERT_TRUE(resolver.ok()) << resolver.status().ToString();
  std::vector<Sockaddr> got = FirstSet(resolver->get());
  ASSERT_EQ(2u, got.size());
  EXPECT_EQ(Sockaddr::Parse("127.0.0.1:7001").value().ToString(), got[0].ToString());
  EXPECT_EQ(Sockaddr::Parse("127.0.0.2:7002").value().ToString(), got[1].ToString());
  EXPECT_EQ("list://127.0.0.1:7001,127.0.0.2:7002", (*resolver)->target());
}

TEST(ResolverTest, ListTargetResolvesHostNamesAtStart) {
  auto resolver = NewResolver("list://localhost:7001");
  ASSERT_TRUE(resolver.ok()) << resolver.status().ToString();
  std::vector<Sockaddr> got = FirstSet(resolver->get());
  ASSERT_EQ(1u, got.size());
  EXPECT_TRUE(got[0].IsLoopback()) << got[0].ToString();
  EXPECT_EQ(7001, got[0].port());
}

TEST(ResolverTest, MalformedTargetsAreRefusedWithTheReason) {
  for (const char* bad :
       {"127.0.0.1:7001", "list://", "list://,", "list://nohostport", "list://127.0.0.1:99999",
        "list://:7001", "list://[::1:7001", "nosuch://x:1"}) {
    auto resolver = NewResolver(bad);
    EXPECT_FALSE(resolver.ok()) << bad;
    EXPECT_TRUE(resolver.status().IsInvalidArgument()) << bad << ": " << resolver.status();
  }
}

}  // namespace
}  // namespace rrpc::rpc
