// What an idle stream costs the server: the heap that open, idle streams hold beyond their
// connections', counted by this binary's own operator new and delete (as connection_memory-test
// does). Raw clients open the streams by hand, so the count is the server's alone.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "rpc/core/header_codec.h"
#include "rpc/core/stream_state.h"
#include "rpc/core/wire_codec.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/test-stream-service.h"
#include "util/testing/counted_heap.h"

namespace rrpc::rpc {
namespace {

constexpr int kConnections = 100;
constexpr int kStreamsPerConnection = 100;

// The opening frame of a stream of `method` with call id `id` and `body` as its request, the
// client granting no window beyond the initial one.
std::string OpenStream(int32_t id, const std::string& method,
                       const google::protobuf::MessageLite& body) {
  RequestHeaderFields h;
  h.call_id = id;
  h.has_remote_method = true;
  const std::string service = "rrpc.rtest.StreamService";
  h.service_name = Slice(service);
  h.method_name = Slice(method);
  h.required_feature_flags.push_back(STREAMS);
  h.stream_flags = STREAM_OPEN;
  return SerializeFrameHead(h, body, 0, 1 << 20).value().slice.ToString();
}

// The opening frames of `n` Hold streams (call ids from `first_id`), in one string.
std::string OpenHoldStreams(int32_t first_id, int n) {
  std::string out;
  for (int i = 0; i < n; i++) {
    out += OpenStream(first_id + i, "Hold", StreamEmptyPB::default_instance());
  }
  return out;
}

// Bytes malloc has handed out and not got back (operator new and Blocks alike).
int64_t MallocInUse() { return static_cast<int64_t>(mallinfo2().uordblks); }

class StreamMemoryTest : public RpcTestBase {
 protected:
  void SetUp() override {
    auto service = std::make_unique<TestStreamService>();
    streams_ = service.get();
    streams_->ReserveHeld(kConnections * kStreamsPerConnection + 16);
    extra_services_.push_back(std::move(service));
    MessengerOptions options;
    options.service_queue_length = kConnections * kStreamsPerConnection;
    StartServer(options);
  }
  void TearDown() override {
    streams_->ReleaseHeld();
    RpcTestBase::TearDown();
  }

  TestStreamService* streams_ = nullptr;
  // Made before anything is counted; each slot is filled in place.
  std::unique_ptr<std::optional<RawConnection>[]> conns_ {
    new std::optional<RawConnection>[ kConnections ]
  };
};

// An idle stream holds its opening call (InboundCall: the handler's context and messages, the
// /rpcz entry, no frame: released as the handler starts), its StreamState, its entry in the
// connection's table, and the handle the application keeps.
TEST_F(StreamMemoryTest, AnIdleStreamHoldsLessThanTwoKibibytesOfServerHeap) {
  if (!RRPC_HEAP_COUNTED) GTEST_SKIP() << "a sanitizer build: heap sizes are its own";
  for (int i = 0; i < kConnections; i++) {
    conns_[i].emplace(server_addr_);
    ASSERT_TRUE(conns_[i]->ok()) << conns_[i]->status().ToString();
    ASSERT_TRUE(conns_[i]->Negotiate().ok());
  }
  // Warm-up: one stream per connection makes what the tables, pools and caches keep once.
  for (int i = 0; i < kConnections; i++) ASSERT_TRUE(conns_[i]->Write(OpenHoldStreams(1, 1)).ok());
  ASSERT_TRUE(WaitForCondition([&] { return streams_->held_count.load() == kConnections; }));
  server_->DumpConnections();  // a trip through the reactors: what they did is done
  const int64_t before = LiveHeapBytes();
  const int measured = kConnections * (kStreamsPerConnection - 1);
  for (int i = 0; i < kConnections; i++) {
    ASSERT_TRUE(conns_[i]->Write(OpenHoldStreams(2, kStreamsPerConnection - 1)).ok());
  }
  ASSERT_TRUE(WaitForCondition(
      [&] { return streams_->held_count.load() == kConnections * kStreamsPerConnection; }));
  server_->DumpConnections();
  const int64_t after = LiveHeapBytes();
  const double per_stream = static_cast<double>(after - before) / measured;
  RecordProperty("heap_bytes_per_idle_stream", std::to_string(per_stream));
  std::cout << "heap bytes per idle stream: " << per_stream << std::endl;
  EXPECT_LT(per_stream, 2048.0);
  EXPECT_GT(per_stream, 128.0) << "the count missed the streams";
}

// A client that opens streams and never reads them (not even the socket) makes the server hold
// at most each stream's window (plus the frames in flight), not what the handlers would produce:
// every producer waits for credit. The server serves other clients meanwhile.
TEST_F(StreamMemoryTest, StalledStreamsHoldAtMostTheirWindows) {
  if (!RRPC_HEAP_COUNTED) GTEST_SKIP() << "a sanitizer build: heap sizes are its own";
  constexpr int kStalled = 100;
  conns_[0].emplace(server_addr_);
  ASSERT_TRUE(conns_[0]->Negotiate().ok());
  const int64_t before = MallocInUse();
  rtest::RangeRequestPB req;
  req.set_first(0);
  req.set_count(1000000);
  req.set_payload_bytes(1000);
  std::string opens;
  for (int i = 0; i < kStalled; i++) opens += OpenStream(i + 1, "Range", req);
  ASSERT_TRUE(conns_[0]->Write(opens).ok());
  ASSERT_TRUE(WaitForCondition([&] { return streams_->producers_waiting.load() == kStalled; }));
  const int64_t growth = MallocInUse() - before;
  const int64_t windows = kStalled * (int64_t{StreamState::kInitialWindow} + 1100);
  RecordProperty("server_bytes_held_by_stalled_streams", std::to_string(growth));
  std::cout << kStalled << " stalled streams: server holds " << growth << " bytes; windows "
            << windows << std::endl;
  EXPECT_LE(growth, windows + (1 << 20));
  // Other clients are served meanwhile.
  StartClient();
  for (int i = 0; i < 50; i++) ASSERT_TRUE(EchoOnce(Proxy(), "beside " + std::to_string(i)).ok());
}

}  // namespace
}  // namespace rrpc::rpc
