// Sockaddr equality: the IPv4 word compare and the general one agree with what the bytes say;
// its size (every connection holds one), and what it makes of a family it does not hold.
#include "rrpc/util/sockaddr.h"

#include <gtest/gtest.h>
#include <sys/un.h>

#include <cstring>

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

TEST(SockaddrTest, HoldsAnIpv6AddressInThirtyTwoBytes) {
  EXPECT_LE(sizeof(Sockaddr), 32u);
  const Sockaddr a = Parsed("[2001:db8::1]:65535");
  EXPECT_EQ(a.family(), AF_INET6);
  EXPECT_EQ(a.addrlen(), sizeof(sockaddr_in6));
  EXPECT_EQ(a.ToString(), "[2001:db8::1]:65535");
  EXPECT_EQ(Sockaddr::FromRaw(a.addr(), a.addrlen()), a);
}

TEST(SockaddrTest, AnAddressOfAnotherFamilyIsUnset) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  strcpy(un.sun_path, "/tmp/a-socket-path-longer-than-an-ipv6-address");
  const Sockaddr a = Sockaddr::FromRaw(reinterpret_cast<const sockaddr*>(&un), sizeof(un));
  EXPECT_EQ(a.family(), 0);
  EXPECT_EQ(a.addrlen(), 0u);
  EXPECT_EQ(a.host(), "<unset>");
  EXPECT_EQ(a, Sockaddr());
}

}  // namespace
}  // namespace rrpc
