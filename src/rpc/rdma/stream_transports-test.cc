// Streams on every transport (docs/streams.md): TCP, TLS, and RDMA on the software NIC with
// private receive queues and with a shared receive queue. The stream windows and the transport's
// own flow control (TCP's, RDMA credits) compose: a stalled reader stops its writer within one
// window, and the stream resumes to its end.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "rpc/core/stream_state.h"
#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/test-stream-service.h"
#include "rpc/testing/tls-test-util.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;
using rtest::NumberPB;
using rtest::RangeRequestPB;

enum class Transport { kTcp, kTls, kRdma, kRdmaSrq };

std::string Name(const ::testing::TestParamInfo<Transport>& info) {
  switch (info.param) {
    case Transport::kTcp:
      return "Tcp";
    case Transport::kTls:
      return "Tls";
    case Transport::kRdma:
      return "Rdma";
    case Transport::kRdmaSrq:
      return "RdmaSrq";
  }
  return "?";
}

class StreamTransportTest : public TlsTestBase, public ::testing::WithParamInterface<Transport> {
 protected:
  void SetUp() override {
    TlsTestBase::SetUp();
    MessengerOptions so, co;
    if (GetParam() == Transport::kTls) {
      so = ServerOptions();
      co = ClientOptions();
    }
    if (GetParam() == Transport::kRdma || GetParam() == Transport::kRdmaSrq) {
      RdmaOptions r;
      r.backend = rdma::RdmaBackend::kSoft;
      r.endpoint.buffer_size = 8192;
      r.endpoint.receive_buffers = 8;
      r.endpoint.send_buffers = 8;
      r.endpoint.rnr_retry = 0;
      r.use_srq = GetParam() == Transport::kRdmaSrq;
      r.srq.buffer_size = 8192;
      r.srq.initial_credits = 8;
      r.srq.max_credits = 16;
      r.srq.max_memory = 2 << 20;  // within the default 8 MiB locked-memory limit
      r.srq.send_buffers = 32;
      so.transport_factory = std::make_shared<RdmaTransportFactory>(r);
      co.transport_factory = std::make_shared<RdmaTransportFactory>(r);
    }
    co.bulk_connection_bytes = 0;  // one connection carries the streams and the calls
    auto service = std::make_unique<TestStreamService>();
    streams_ = service.get();
    extra_services_.push_back(std::move(service));
    StartServer(so);
    StartClient(co);
  }
  rtest::StreamServiceProxy StreamProxy() {
    return rtest::StreamServiceProxy(client_, server_addr_);
  }
  std::string ClientTransport() {
    auto conns = client_->DumpConnections();
    return conns.size() == 1 ? conns[0].transport : "none";
  }

  TestStreamService* streams_ = nullptr;
};

TEST_P(StreamTransportTest, StalledReaderHoldsOneWindowThenTheStreamCompletes) {
  constexpr uint32_t kPayload = 3000;
  constexpr int kCount = 2000;
  StreamOptions options;
  options.receive_window = StreamState::kInitialWindow;
  RangeRequestPB req;
  req.set_first(0);
  req.set_count(kCount);
  req.set_payload_bytes(kPayload);
  auto stream = StreamProxy().Range(req, options);
  ASSERT_TRUE(WaitForCondition([&] { return streams_->producers_waiting.load() == 1; }));
  const int64_t message_bytes = kPayload + 16;
  EXPECT_LE(streams_->range_messages_queued.load() * message_bytes,
            StreamState::kInitialWindow + message_bytes);
  // Unary calls on the same connection still pass.
  ASSERT_TRUE(Echo("beside a stalled stream").ok());
  NumberPB n;
  int64_t read = 0;
  while (true) {
    Result<bool> got = stream.Read(&n);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if (!*got) break;
    ASSERT_EQ(read, n.n());
    ASSERT_EQ(kPayload, n.payload().size());
    read++;
  }
  EXPECT_EQ(kCount, read);
  EXPECT_TRUE(stream.Finish().ok());
  const std::string transport = ClientTransport();
  if (GetParam() == Transport::kRdma || GetParam() == Transport::kRdmaSrq) {
    EXPECT_EQ("rdma", transport);
  }
}

TEST_P(StreamTransportTest, BidiStreamCarriesLargeSidecars) {
  auto stream = StreamProxy().Double();
  for (int i = 0; i < 20; i++) {
    NumberPB n;
    n.set_n(i);
    const std::string bytes = Pattern(100000 + i * 1000, i);
    BlockRef block = Block::Allocate(bytes.size());
    memcpy(block->data(), bytes.data(), bytes.size());
    ASSERT_TRUE(stream.Write(n, {BlockSlice{block, Slice(block->data(), bytes.size())}}).ok());
    NumberPB back;
    std::vector<BlockSlice> sidecars;
    Result<bool> got = stream.Read(&back, &sidecars);
    ASSERT_TRUE(got.ok() && *got) << got.status().ToString();
    EXPECT_EQ(2 * i, back.n());
    ASSERT_EQ(1u, sidecars.size());
    EXPECT_EQ(bytes, sidecars[0].slice.ToString());
  }
  stream.CloseWrites();
  EXPECT_TRUE(stream.Finish().ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, StreamTransportTest,
                         ::testing::Values(Transport::kTcp, Transport::kTls, Transport::kRdma,
                                           Transport::kRdmaSrq),
                         Name);

}  // namespace
}  // namespace rrpc::rpc
