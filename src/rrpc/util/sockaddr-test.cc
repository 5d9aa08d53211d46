// Sockaddr equality: the IPv4 word compare and the general one agree with what the bytes say.
#include "rrpc/util/sockaddr.h"

#include <gtest/gtest.h>

namespace rrpc {
namespace {

Sockaddr Parsed(const std::string& s) {
  Result<Sockaddr> a = Sockaddr::Parse(s);
  EXPECT_TRUE(a.ok()) << s;
  return a.ok() ? *a : Sockaddr();
}

TEST(SockaddrTest, Ipv4EqualOnlyWithSameAddressAndPort) {
  EXPECT_EQ(Parsed("127.0.0.1:80"), Sockaddr::Loopback(80));
  EXPECT_NE(Parsed("127.0.0.1:80"), Parsed("127.0.0.1:81"));
  EXPECT_NE(Parsed("127.0.0.1:80"), Parsed("127.0.0.2:80"));
  EXPECT_NE(Parsed("10.0.0.1:80"), Parsed("127.0.0.1:80"));
}

TEST(SockaddrTest, Ipv6ComparedByItsBytesAndNeverEqualToIpv4) {
  EXPECT_EQ(Parsed("[::1]:80"), Parsed("[::1]:80"));
  EXPECT_NE(Parsed("[::1]:80"), Parsed("[::1]:81"));
  EXPECT_NE(Parsed("[::1]:80"), Parsed("[::2]:80"));
  EXPECT_NE(Parsed("[::1]:80"), Parsed("127.0.0.1:80"));
}

}  // namespace
}  // namespace rrpc
