// ChooseGid on GID tables as real ports show them (finding 3 of issue 27): an mlx5 RoCE port
// lists the IPv6 link-local entries first (v1 at index 0, v2 at index 1), then a v1/v2 pair per
// IP address. The old choice (the first v2 entry, else index 0) took the link-local one.
#include "rpc/rdma/bootstrap/gid_choice.h"

#include <gtest/gtest.h>
#include <net/if.h>

#include <memory>
#include <string>
#include <vector>

#include "rpc/rdma/soft/soft_device.h"

namespace rrpc::rdma {
namespace {

Gid LinkLocal() {
  Gid g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  for (int i = 8; i < 16; ++i) g[i] = static_cast<uint8_t>(0x10 + i);
  return g;
}

Gid Of(const std::string& host) {
  Gid g{};
  EXPECT_TRUE(GidOfAddress(Sockaddr::Parse(host + ":1").value(), &g)) << host;
  return g;
}

// An mlx5 RoCE port with two IPv4 addresses.
std::vector<GidEntry> Mlx5Table() {
  return {{0, LinkLocal(), GidType::kRoceV1},       {1, LinkLocal(), GidType::kRoceV2},
          {2, Of("10.0.0.5"), GidType::kRoceV1},    {3, Of("10.0.0.5"), GidType::kRoceV2},
          {4, Of("192.168.7.9"), GidType::kRoceV1}, {5, Of("192.168.7.9"), GidType::kRoceV2}};
}

TEST(GidChoiceTest, TheV2EntryOfTheBootstrapAddressWins) {
  Result<GidEntry> e = ChooseGid(Mlx5Table(), Sockaddr::Parse("192.168.7.9:5000").value());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->index, 5);
  EXPECT_EQ(e->type, GidType::kRoceV2);
}

TEST(GidChoiceTest, WithoutAnAddressTheFirstRoutableV2EntryWinsNotTheLinkLocalOne) {
  Result<GidEntry> e = ChooseGid(Mlx5Table(), Sockaddr());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->index, 3);
  // An address of no entry (a loopback bootstrap) chooses the same way.
  e = ChooseGid(Mlx5Table(), Sockaddr::Parse("127.0.0.1:1").value());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->index, 3);
}

TEST(GidChoiceTest, ZeroEntriesAreSkippedAndLinkLocalIsTheLastResort) {
  std::vector<GidEntry> t = {{0, Gid{}, GidType::kRoceV2},
                             {1, LinkLocal(), GidType::kRoceV1},
                             {2, LinkLocal(), GidType::kRoceV2}};
  Result<GidEntry> e = ChooseGid(t, Sockaddr());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->index, 2);
  // Only v1 routable: v1 before any link-local.
  t.push_back({3, Of("10.1.1.1"), GidType::kRoceV1});
  e = ChooseGid(t, Sockaddr());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->index, 3);
  EXPECT_TRUE(ChooseGid({{0, Gid{}, GidType::kRoceV2}}, Sockaddr()).status().IsNotFound());
}

TEST(GidChoiceTest, AnIpv6AddressMatchesItsOwnEntry) {
  std::vector<GidEntry> t = Mlx5Table();
  t.push_back({6, Of("[2001:db8::7]"), GidType::kRoceV1});
  t.push_back({7, Of("[2001:db8::7]"), GidType::kRoceV2});
  Result<GidEntry> e = ChooseGid(t, Sockaddr::Parse("[2001:db8::7]:9").value());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->index, 7);
}

TEST(GidChoiceTest, InfinibandTakesTheFirstNonZeroEntryLinkLocalPrefixAndAll) {
  std::vector<GidEntry> t = {{0, LinkLocal(), GidType::kIb}, {1, Gid{}, GidType::kIb}};
  Result<GidEntry> e = ChooseGid(t, Sockaddr::Parse("10.0.0.5:1").value());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->index, 0);
  EXPECT_EQ(e->type, GidType::kIb);
}

// The software backend's port is an mlx5 RoCE port: link-local v1 and v2 first, and it opens on
// the routable v2 entry, not on the first v2 one.
TEST(GidChoiceTest, TheSoftPortListsLinkLocalEntriesFirstAndUsesItsRoutableV2One) {
  std::unique_ptr<SoftDevice> dev = OpenSoftDevice().value();
  const PortInfo& port = dev->port();
  ASSERT_EQ(port.gid_table.size(), 4u);
  EXPECT_TRUE(GidIsLinkLocal(port.gid_table[0].gid));
  EXPECT_EQ(port.gid_table[0].type, GidType::kRoceV1);
  EXPECT_TRUE(GidIsLinkLocal(port.gid_table[1].gid));
  EXPECT_EQ(port.gid_table[1].type, GidType::kRoceV2);
  EXPECT_EQ(port.gid_index, 3);
  EXPECT_EQ(port.gid_type, GidType::kRoceV2);
  EXPECT_FALSE(GidIsLinkLocal(port.gid));
  EXPECT_TRUE(port.ethernet);
  EXPECT_TRUE(dev->UseGidIndex(1).ok());
  EXPECT_TRUE(GidIsLinkLocal(dev->port().gid));
  EXPECT_TRUE(dev->UseGidIndex(9).IsNotFound());
}

// Finding 3 of issue 27, per connection: the entry of the bootstrap socket's own address, so two
// connections over two addresses of one port use two GIDs; an entry the user pinned wins.
TEST(GidChoiceTest, EachConnectionTakesTheEntryOfItsBootstrapAddressUnlessOneIsPinned) {
  PortInfo port;
  port.gid_table = Mlx5Table();
  port.gid_index = 3;
  port.gid = port.gid_table[3].gid;
  port.gid_type = GidType::kRoceV2;
  EXPECT_EQ(ConnectionGid(port, Sockaddr::Parse("10.0.0.5:7").value()).index, 3);
  EXPECT_EQ(ConnectionGid(port, Sockaddr::Parse("192.168.7.9:7").value()).index, 5);
  EXPECT_EQ(ConnectionGid(port, Sockaddr()).index, 3);
  port.gid_pinned = true;
  EXPECT_EQ(ConnectionGid(port, Sockaddr::Parse("192.168.7.9:7").value()).index, 3);
  port.gid_table.clear();  // nothing usable: the port's default
  port.gid_pinned = false;
  EXPECT_EQ(ConnectionGid(port, Sockaddr::Parse("192.168.7.9:7").value()).index, 3);
}

// Finding 4: an address no entry holds (an IPv6 link-local one, or a table read without
// addresses) chooses among the entries of its own netdev (ibv_gid_entry::ndev_ifindex) first.
TEST(GidChoiceTest, WithoutTheAddressTheEntriesOfItsNetdevComeFirst) {
  std::vector<GidEntry> t = Mlx5Table();
  for (GidEntry& e : t) e.ndev_ifindex = e.index < 4 ? 5 : 7;  // 10.0.0.5 on 5, 192.168.7.9 on 7
  const Sockaddr elsewhere = Sockaddr::Parse("172.16.0.1:1").value();
  EXPECT_EQ(ChooseGid(t, elsewhere, 7)->index, 5);
  EXPECT_EQ(ChooseGid(t, elsewhere, 5)->index, 3);
  EXPECT_EQ(ChooseGid(t, elsewhere, 0)->index, 3);
  EXPECT_EQ(ChooseGid(t, elsewhere, 9)->index, 3);  // a netdev of no entry: as without one
  EXPECT_EQ(ChooseGid(t, Sockaddr::Parse("10.0.0.5:1").value(), 7)->index, 3);  // address first
}

std::vector<PortCandidate> Host() {
  std::vector<GidEntry> b2 = {{0, LinkLocal(), GidType::kRoceV2},
                              {1, Of("10.0.0.5"), GidType::kRoceV2}};
  std::vector<GidEntry> c1 = {{0, Of("192.168.7.9"), GidType::kRoceV1},
                              {1, Of("192.168.7.9"), GidType::kRoceV2, 7}};
  return {{"mlx5_0", 1, false, {{0, Of("10.9.9.9"), GidType::kRoceV2}}},  // DOWN
          {"mlx5_1", 1, true, {}},                                        // no GID
          {"mlx5_1", 2, true, b2},
          {"mlx5_2", 1, true, c1}};
}

TEST(GidChoiceTest, ThePortScanTakesAnActivePortThePortOfTheAddressFirst) {
  EXPECT_EQ(ChoosePort(Host(), Sockaddr()).value(), 2u);
  EXPECT_EQ(ChoosePort(Host(), Sockaddr::Parse("192.168.7.9:1").value()).value(), 3u);
  EXPECT_EQ(ChoosePort(Host(), Sockaddr::Parse("10.0.0.5:1").value()).value(), 2u);
  // A DOWN port holding the address is never taken.
  EXPECT_EQ(ChoosePort(Host(), Sockaddr::Parse("10.9.9.9:1").value()).value(), 2u);
  // An address of no entry, on mlx5_2's netdev.
  EXPECT_EQ(ChoosePort(Host(), Sockaddr::Parse("172.16.0.1:1").value(), 7).value(), 3u);
  std::vector<PortCandidate> down = Host();
  down[2].active = down[3].active = false;
  Status s = ChoosePort(down, Sockaddr()).status();
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_NE(s.ToString().find("mlx5_0 port 1: not active"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("mlx5_1 port 1: no usable GID"), std::string::npos) << s.ToString();
  EXPECT_TRUE(ChoosePort({}, Sockaddr()).status().IsNotFound());
}

TEST(GidChoiceTest, TheLoopbackAddressIsOnTheLoopbackInterface) {
  EXPECT_EQ(LocalInterfaceIndex(Sockaddr::Parse("127.0.0.1:1").value()), if_nametoindex("lo"));
  EXPECT_EQ(LocalInterfaceIndex(Sockaddr()), 0u);
  EXPECT_EQ(LocalInterfaceIndex(Sockaddr::Parse("192.0.2.77:1").value()), 0u);  // TEST-NET-1
}

}  // namespace
}  // namespace rrpc::rdma
