// The inbound memory budget: a client that sends large requests and never reads cannot make the
// server hold more than the per-connection limit (reads pause, others are served); a frame that
// could never fit is refused; a frame sent too slowly is cut off.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <iostream>
#include <string>
#include <thread>

#include "rpc/core/messenger_internals.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/memory_tracker.h"

namespace rrpc::rpc {
namespace {

constexpr size_t kMiB = 1 << 20;

// Resident set size of this process, in bytes.
int64_t ProcessRssBytes() {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

class InboundMemoryTest : public RpcTestBase {
 protected:
  void Start(size_t per_connection, size_t per_messenger) {
    MessengerOptions options;
    options.inbound_memory_per_connection = per_connection;
    options.inbound_memory_limit = per_messenger;
    options.service_queue_length = 10000;  // memory, not the queue, must be what stops them
    options.idle_scan_period = MonoDelta::FromMilliseconds(50);
    options.frame_receive_timeout = MonoDelta::FromMilliseconds(500);
    // Add runs on the reactor: the workers are all held at the gate in some tests.
    StartServer(options, 0, {"Add"});
    StartClient();
  }
  MemoryTracker* memory() { return MessengerInternals::inbound_memory(*server_); }
  Status Echo(const std::string& data) {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    return Proxy().Echo(req, &resp, &ctl);
  }
};

TEST_F(InboundMemoryTest, NeverReadingClientWithLargeRequestsIsPausedAtItsLimit) {
  constexpr size_t kLimit = 8 * kMiB;
  Start(kLimit, 64 * kMiB);
  BlockEchoes();  // requests pile up behind two blocked workers, holding their bytes
  auto hog = std::make_unique<RawConnection>(server_addr_);
  ASSERT_TRUE(hog->ok());
  ASSERT_TRUE(hog->Negotiate().ok());
  timeval tv{0, 300 * 1000};  // a write the server does not take gives up
  ASSERT_EQ(0, ::setsockopt(hog->fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
  rtest::EchoRequestPB big;
  big.set_data(std::string(kMiB, 'x'));
  big.set_fail_with("small answer");
  const int64_t rss_before = ProcessRssBytes();
  // 256 MiB offered; unbounded, the server would hold all of it.
  int sent = 0;
  for (int i = 0; i < 256; i++) {
    if (!hog->Write(CallFrame(i, "rrpc.rtest.EchoService", "Echo", big)).ok()) break;
    sent++;
  }
  EXPECT_LT(sent, 64) << "the server kept reading";
  ASSERT_TRUE(gate_.WaitForEntered(2));
  // Held: what was read before the pause, at most one read beyond the limit.
  EXPECT_LE(memory()->peak(), static_cast<int64_t>(kLimit + 2 * kMiB));
  EXPECT_GE(MessengerInternals::metrics(*server_)->reads_paused_for_memory->value(), 1);
  const int64_t rss_growth = ProcessRssBytes() - rss_before;
#if !defined(__SANITIZE_ADDRESS__)  // ASAN's quarantine keeps freed memory resident
  EXPECT_LT(rss_growth, static_cast<int64_t>(64 * kMiB));
#endif
  std::cout << "FIGURE never_reading_client limit_mib=8 offered_mib=256 accepted_frames=" << sent
            << " peak_held_mib=" << static_cast<double>(memory()->peak()) / kMiB
            << " rss_growth_mib=" << static_cast<double>(rss_growth) / kMiB << std::endl;

  // Another client is served meanwhile (Add runs inline, without a worker).
  rtest::AddRequestPB add;
  add.set_a(2);
  add.set_b(3);
  rtest::AddResponsePB sum;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  Status s = Proxy().Add(add, &sum, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(5, sum.sum());

  // Once the calls finish and the client goes, every byte is released. (A paused connection
  // reads nothing, so it learns of the close when a write fails: the client resets it.)
  gate_.Open();
  hog.reset();
  EXPECT_TRUE(WaitForCondition([&] { return memory()->consumption() == 0; }))
      << memory()->consumption();
}

TEST_F(InboundMemoryTest, MessengerLimitPausesEveryConnectionAboveIt) {
  Start(64 * kMiB, 4 * kMiB);
  BlockEchoes();
  rtest::EchoRequestPB big;
  big.set_data(std::string(kMiB, 'y'));
  std::vector<std::unique_ptr<RawConnection>> hogs;
  for (int c = 0; c < 3; c++) {
    hogs.push_back(std::make_unique<RawConnection>(server_addr_));
    ASSERT_TRUE(hogs.back()->ok());
    ASSERT_TRUE(hogs.back()->Negotiate().ok());
    timeval tv{0, 200 * 1000};
    ASSERT_EQ(0, ::setsockopt(hogs.back()->fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
    for (int i = 0; i < 32; i++) {
      if (!hogs.back()->Write(CallFrame(i, "rrpc.rtest.EchoService", "Echo", big)).ok()) break;
    }
  }
  // Three connections each allowed 64 MiB, but all together at most ~4 MiB plus a read each.
  EXPECT_LE(memory()->peak(), static_cast<int64_t>(4 * kMiB + 3 * 2 * kMiB));
  std::cout << "FIGURE messenger_limit limit_mib=4 connections=3 peak_held_mib="
            << static_cast<double>(memory()->peak()) / kMiB << std::endl;
  // Closed with unread responses, the sockets reset: the server's writes fail, it closes.
  gate_.Open();
  hogs.clear();
  EXPECT_TRUE(WaitForCondition([&] { return memory()->consumption() == 0; }))
      << memory()->consumption();
}

TEST_F(InboundMemoryTest, FrameThatCouldNeverFitIsRefusedWithAFatalError) {
  Start(kMiB, 64 * kMiB);
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  rtest::EchoRequestPB big;
  big.set_data(std::string(3 * kMiB, 'z'));
  // The server stops reading partway; the write may fail once it has closed.
  std::thread writer(
      [&] { (void)conn.Write(CallFrame(1, "rrpc.rtest.EchoService", "Echo", big)); });
  ResponseHeader header;
  std::string body;
  Status s = conn.ReadParsedFrame(&header, &body);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(kNegotiateCallId, header.call_id());
  ErrorStatusPB error;
  ASSERT_TRUE(error.ParseFromString(body));
  EXPECT_EQ(ErrorStatusPB::FATAL_INVALID_FRAME, error.code());
  EXPECT_NE(std::string::npos, error.message().find("inbound memory limit")) << error.message();
  EXPECT_TRUE(conn.WaitForClose());
  conn.ShutdownBoth();
  writer.join();
  EXPECT_EQ(1, MessengerInternals::metrics(*server_)->frames_refused->value());
  EXPECT_TRUE(WaitForCondition([&] { return memory()->consumption() == 0; }));
  EXPECT_TRUE(Echo("fine").ok());
}

TEST_F(InboundMemoryTest, SlowlySentFrameIsCutOff) {
  Start(64 * kMiB, 64 * kMiB);  // frame_receive_timeout 500 ms
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  rtest::EchoRequestPB req;
  req.set_data(std::string(4 * kMiB, 's'));
  const std::string frame = CallFrame(1, "rrpc.rtest.EchoService", "Echo", req);
  // One small piece every 50 ms: never idle, never done (4 MiB would take days).
  std::atomic<bool> closed{false};
  size_t offset = 0;
  const MonoTime give_up = MonoTime::Now() + MonoDelta::FromSeconds(60);
  while (!closed && MonoTime::Now() < give_up) {
    if (!conn.Write(frame.substr(offset, 100)).ok()) {
      closed = true;  // the server closed the connection between two pieces
      break;
    }
    offset += 100;
    if (conn.WaitForClose(MonoDelta::FromMilliseconds(50))) closed = true;
  }
  EXPECT_TRUE(closed) << "server still waits for the frame after " << offset << " bytes";
  EXPECT_EQ(1, MessengerInternals::metrics(*server_)->frames_refused->value());
  EXPECT_TRUE(WaitForCondition([&] { return memory()->consumption() == 0; }));
  EXPECT_TRUE(Echo("fine").ok());
}

}  // namespace
}  // namespace rrpc::rpc
