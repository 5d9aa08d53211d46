// What an idle connection costs: the heap that open, negotiated, idle server connections hold,
// counted by this binary's own operator new and delete (every C++ allocation of the process, by
// the usable size malloc gave it). docs/performance-history.md ("Idle connection memory") has
// the RSS behind the bound.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/testing/counted_heap.h"

namespace rrpc::rpc {
namespace {

class ConnectionMemoryTest : public RpcTestBase {
 protected:
  void SetUp() override { StartServer(); }

  // Opens and negotiates connections [from, to) of conns_; once Negotiate() has the reply, the
  // server marked its side open in the same reactor callback.
  void OpenConnections(int from, int to) {
    for (int i = from; i < to; i++) {
      conns_[i].emplace(server_addr_);
      ASSERT_TRUE(conns_[i]->ok()) << conns_[i]->status().ToString();
      Status s = conns_[i]->Negotiate();
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }

  // Server connections open, after a trip through every reactor (DumpConnections runs there),
  // so what they did for the connections opened so far is done.
  int OpenServerConnections() {
    int open = 0;
    for (const ConnectionInfo& c : server_->DumpConnections()) {
      if (c.direction == "server" && c.state == "open") open++;
    }
    return open;
  }

  static constexpr int kWarmUp = 16;
  static constexpr int kMeasured = 256;
  // Made before anything is counted; each slot is filled in place (no allocation of its own).
  std::unique_ptr<std::optional<RawConnection>[]> conns_ {
    new std::optional<RawConnection>[ kWarmUp + kMeasured ]
  };
};

// An idle server connection holds its Connection, its transport and its entry in the reactor's
// map, and nothing it only needs while negotiating (dropped once open) or while calls are in
// flight (a read block, the client-side deadline queue). libev's per-descriptor arrays (C, not
// counted here) add about 50 bytes more.
TEST_F(ConnectionMemoryTest, AnIdleServerConnectionHoldsLessThanOneKibibyteOfHeap) {
  if (!RRPC_HEAP_COUNTED) GTEST_SKIP() << "a sanitizer build: heap sizes are its own";
  // The first connections make what a reactor and this thread keep once (spare read blocks, the
  // maps' first buckets, the negotiation's cached messages).
  OpenConnections(0, kWarmUp);
  ASSERT_EQ(OpenServerConnections(), kWarmUp);
  const int64_t before = LiveHeapBytes();
  OpenConnections(kWarmUp, kWarmUp + kMeasured);
  ASSERT_EQ(OpenServerConnections(), kWarmUp + kMeasured);
  const int64_t after = LiveHeapBytes();
  const double per_connection = static_cast<double>(after - before) / kMeasured;
  RecordProperty("heap_bytes_per_idle_connection", std::to_string(per_connection));
  EXPECT_LT(per_connection, 1024.0) << "heap bytes per idle server connection";
  // And it is mostly the server's: the raw clients here hold no heap.
  EXPECT_GT(per_connection, 256.0) << "the count missed the connections";
}

}  // namespace
}  // namespace rrpc::rpc
