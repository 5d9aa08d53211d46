// ChooseGid on GID tables as real ports show them (finding 3 of issue 27): an mlx5 RoCE port
// lists the IPv6 link-local entries first (v1 at index 0, v2 at index 1), then a v1/v2 pair per
// IP address. The old choice (the first v2 entry, else index 0) took the link-local one.
#include "rrpc/rpc/rdma/gid_choice.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "rrpc/rpc/rdma/soft_device.h"

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

}  // namespace
}  // namespace rrpc::rdma
