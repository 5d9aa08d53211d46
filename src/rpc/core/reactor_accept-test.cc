// Where an accepted connection is served: the kernel picks the listener (SO_REUSEPORT hashes the
// client's address), and the reactor that accepted hands the connection to the reactor of the
// messenger owning the fewest server connections. So a client's small-call and bulk connections
// to a server with two reactors land on different reactors, and connections opened one after
// another spread evenly whatever the hash says.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/reactor.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

class AcceptPlacementTest : public RpcTestBase {
 protected:
  // Server connections per reactor index, as the server's /connections shows them.
  std::map<int, int> ServerConnectionsByReactor() {
    std::map<int, int> by_reactor;
    for (const ConnectionInfo& c : server_->DumpConnections()) {
      if (c.direction == "server") by_reactor[c.reactor]++;
    }
    return by_reactor;
  }
};

TEST_F(AcceptPlacementTest, ConnectionsOpenedOneByOneSpreadEvenlyOverReactors) {
  MessengerOptions options;
  options.num_reactors = 4;
  StartServer(options);
  // One at a time (each negotiated before the next connects): every placement sees the counts
  // the ones before it left. 16 over 4 reactors by the kernel's hash alone: even about once in
  // 70 runs.
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 16; i++) {
    held.push_back(std::make_unique<RawConnection>(server_addr_));
    ASSERT_TRUE(held.back()->ok()) << held.back()->status().ToString();
    ASSERT_TRUE(held.back()->Negotiate().ok());
  }
  EXPECT_EQ((std::map<int, int>{{0, 4}, {1, 4}, {2, 4}, {3, 4}}), ServerConnectionsByReactor());
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(4, MessengerInternals::reactor(*server_, i)->server_connections()) << i;
  }
  const int64_t handed = MessengerInternals::metrics(*server_)->connections_handed_over->value();
  EXPECT_LE(0, handed);
  EXPECT_GE(16, handed);

  // Closing gives the counts back: the first four placed (one on each reactor) close, and the
  // next four make the reactors even again.
  held.erase(held.begin(), held.begin() + 4);
  ASSERT_TRUE(WaitForCondition([&] {
    int open = 0;
    for (const auto& [reactor, n] : ServerConnectionsByReactor()) open += n;
    return open == 12;
  }));
  std::map<int, int> left = ServerConnectionsByReactor();
  for (int i = 0; i < 4; i++) {
    held.push_back(std::make_unique<RawConnection>(server_addr_));
    ASSERT_TRUE(held.back()->ok());
    ASSERT_TRUE(held.back()->Negotiate().ok());
  }
  EXPECT_EQ((std::map<int, int>{{0, 4}, {1, 4}, {2, 4}, {3, 4}}), ServerConnectionsByReactor())
      << "after closing four, the reactors held " << left[0] << "/" << left[1] << "/" << left[2]
      << "/" << left[3];
}

TEST_F(AcceptPlacementTest, ASmallAndABulkConnectionServeOnDifferentReactors) {
  MessengerOptions server_options;
  server_options.num_reactors = 2;
  StartServer(server_options);
  MessengerOptions client_options;
  client_options.bulk_connection_bytes = 64 * 1024;
  StartClient(client_options);
  rtest::EchoServiceProxy proxy = Proxy();
  for (const size_t bytes : {size_t{16}, size_t{256 * 1024}}) {
    rtest::EchoRequestPB req;
    req.set_data(std::string(bytes, 'x'));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
    EXPECT_EQ(bytes, resp.data().size());
  }
  EXPECT_EQ((std::map<int, int>{{0, 1}, {1, 1}}), ServerConnectionsByReactor());
}

}  // namespace
}  // namespace rrpc::rpc
