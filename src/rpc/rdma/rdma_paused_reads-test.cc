// Many large calls in flight on one RDMA connection whose server pauses reads (docs/rdma.md,
// "Paused reads and credits"). A paused RDMA connection holds the data messages that still
// arrive without reposting their receive buffers, so the peer's credits run out, which is the
// backpressure. But the peer spends its last credit on a message that carries grants, and then
// needs one credit more to send the grants it owes for our next messages: holding that message's
// buffer too left the server's responses waiting for grants and the client waiting for a credit,
// while the unsent responses (or the calls' memory) kept reads paused, and every call waited for
// its timeout. The test builds that state step by step: handlers wait at a gate until the server
// has paused (its connection's inbound memory limit is reached) and the client has spent its
// credits, then 64 responses of 1 MiB go out while reads stay paused. Private receive queue
// (with and without spare blocks) and SRQ; rnr_retry = 0, so a credit mistake fails loudly; every
// call has a deadline, so a stall ends the test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

enum class Mode { kPrivate, kPrivateNoSpares, kSrq };

RdmaOptions Rdma(Mode mode) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.endpoint.buffer_size = 16 * 1024;
  o.endpoint.receive_buffers = 16;
  o.endpoint.send_buffers = 16;
  o.endpoint.spare_receive_buffers = mode == Mode::kPrivateNoSpares ? 0 : 4;
  o.endpoint.rnr_retry = 0;
  // The client waits for credits while the server, paused, holds its handlers at a gate: a stall
  // on purpose, not a dead peer (docs/reliability.md, "Dead peers over RDMA").
  o.transport.credit_starved_timeout = MonoDelta::Max();
  if (mode == Mode::kSrq) {
    o.use_srq = true;
    o.srq.initial_credits = 8;
    o.srq.max_credits = 16;
    o.srq.max_memory = 8 << 20;
  }
  return o;
}

class RdmaPausedReadsTest : public RpcTestBase, public ::testing::WithParamInterface<Mode> {
 protected:
  void Start() {
    const RdmaOptions o = Rdma(GetParam());
    MessengerOptions so, co;
    so.num_reactors = 1;
    co.num_reactors = 1;
    so.service_queue_length = 1024;
    // The server pauses reads once the calls it holds pass this (the 64 calls hold 64 MiB).
    so.inbound_memory_per_connection = 8 << 20;
    co.bulk_connection_bytes = 0;  // one connection carries every call
    so.transport_factory = std::make_shared<RdmaTransportFactory>(o);
    co.transport_factory = std::make_shared<RdmaTransportFactory>(o);
    StartServer(so);
    StartClient(co);
  }
  static bool ReadsPaused(const std::shared_ptr<Messenger>& m) {
    auto conns = m->DumpConnections();
    return conns.size() == 1 && conns[0].reads_paused;
  }
};

TEST_P(RdmaPausedReadsTest, SixtyFourOneMiBCallsAnsweredWhileReadsArePaused) {
  Start();
  constexpr int kCalls = 64;
  // Whether the client's last credit goes on a data message (the deadlock before the fix) or on
  // a grant-only one (harmless) depends on how its completions batch: each round is another
  // chance to meet it; the outcome checked is the same every time.
  constexpr int kRounds = 3;
  std::vector<std::string> sidecars;
  for (int i = 0; i < kCalls; i++) sidecars.push_back(Pattern(1 << 20, i));
  // One gate per round (a HandlerGate opens once); all open when the test ends, however it ends,
  // so that no handler waits on a gate gone.
  struct Gates {
    HandlerGate g[kRounds];
  };
  auto gates = std::make_shared<Gates>();
  struct OpenAllAtExit {
    std::shared_ptr<Gates> gates;
    ~OpenAllAtExit() {
      for (HandlerGate& gate : gates->g) gate.Open();
    }
  } open_all_at_exit{gates};
  service_->set_echo_hook([gates](const rtest::EchoRequestPB& req, RpcContext*) {
    gates->g[std::stoi(req.data()) / kCalls].Pass();
  });
  auto proxy = Proxy();
  for (int round = 0; round < kRounds; round++) {
    HandlerGate& gate = gates->g[round];
    std::vector<rtest::EchoRequestPB> reqs(kCalls);
    std::vector<rtest::EchoResponsePB> resps(kCalls);
    std::vector<RpcController> ctls(kCalls);
    CountDownLatch done(kCalls);
    for (int i = 0; i < kCalls; i++) {
      reqs[i].set_data(std::to_string(round * kCalls + i));
      // A stall ends the call with a timeout (the test fails) instead of hanging the test.
      ctls[i].set_timeout(MonoDelta::FromSeconds(60));
      ctls[i].AddOutboundSidecar(Slice(sidecars[i]));
      proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
    }
    // The server holds 8 MiB of calls and pauses; the messages still arriving are held, the
    // client spends its credits and stops with most of its 64 MiB unsent. No timing: each step
    // is waited for.
    ASSERT_TRUE(WaitForCondition([&] {
      if (!ReadsPaused(server_)) return false;
      const std::string credits = ConnectionDetail(client_, "credits");
      return (credits == "0" || credits == "1") &&
             ConnectionDetail(server_, "messages held (reads paused)") != "0";
    })) << round;
    EXPECT_EQ(done.count(), kCalls);  // nothing answered yet
    // The handlers answer: 64 MiB of responses. Reads stay paused until calls end, and calls
    // end only when their responses went out, which takes the client's grants.
    gate.Open();
    ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120))) << round;
    for (int i = 0; i < kCalls; i++) {
      ASSERT_TRUE(ctls[i].status().ok())
          << round << " " << i << ": " << ctls[i].status().ToString();
      EXPECT_EQ(resps[i].data(), std::to_string(round * kCalls + i));
      ASSERT_EQ(ctls[i].num_inbound_sidecars(), 1u);
      EXPECT_TRUE(ctls[i].inbound_sidecar(0) == Slice(sidecars[i])) << round << " " << i;
    }
    ASSERT_TRUE(WaitForCondition([&] { return !ReadsPaused(server_); })) << round;
    EXPECT_EQ(ConnectionDetail(server_, "messages held (reads paused)"), "0") << round;
  }
  LOG(INFO) << "held messages copied out (the client's last credit): "
            << ConnectionDetail(server_, "held messages copied out");
}

INSTANTIATE_TEST_SUITE_P(ReceiveModes, RdmaPausedReadsTest,
                         ::testing::Values(Mode::kPrivate, Mode::kPrivateNoSpares, Mode::kSrq),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           switch (info.param) {
                             case Mode::kPrivate:
                               return std::string("PrivateRq");
                             case Mode::kPrivateNoSpares:
                               return std::string("PrivateRqNoSpares");
                             case Mode::kSrq:
                               return std::string("Srq");
                           }
                           return std::string();
                         });

}  // namespace
}  // namespace rrpc::rpc
