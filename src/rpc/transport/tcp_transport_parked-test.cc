// TcpTransport's parked reads (tcp_transport_parked.cc) on real loopback sockets and a real libev
// loop: the thread the connection gives the reads (here the test's own thread, or one it starts)
// reads its frame with a blocking recv(), which switches the socket to blocking mode; from then
// on the reactor's writes and reads on it still never wait; a shutdown under a blocked read ends
// it, a signal does not, and a deadline ends it once passed.
#include <ev.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/transport/frame-test-util.h"
#include "rpc/transport/frame_format.h"
#include "rpc/transport/tcp_transport.h"
#include "rrpc/util/monotime.h"
#include "util/socket.h"
#include "util/testing/socket-test-util.h"
#include "util/testing/syscall-test-util.h"

namespace rrpc::rpc {
namespace {

constexpr MonoDelta kLong = MonoDelta::FromSeconds(20);

class FrameHost : public TransportHost {
 public:
  void OnTransportConnected() override {}
  void OnBytesReceived(size_t, MonoTime) override {}
  void OnPreamble(Slice) override {}
  void OnFrame(BlockSlice&& frame) override { frames.push_back(frame.slice.ToString()); }
  void OnWritable() override {}
  void OnTransportFailed(const Status& reason) override { failures.push_back(reason); }
  void OnProtocolError(const Status& reason) override { failures.push_back(reason); }

  std::vector<std::string> frames;
  std::vector<Status> failures;
};

class TcpTransportParkedTest : public ::testing::Test {
 protected:
  // The transport's side of a loopback pair, started on loop_ with its reads parked; peer_ is
  // the other side (blocking).
  void SetUp() override {
    loop_ = ev_loop_new(EVFLAG_AUTO);
    Socket accepted;
    ASSERT_TRUE(ConnectLoopbackPair(&peer_, &accepted).ok());
    fd_ = accepted.fd();
    transport_ = std::make_unique<TcpTransport>(std::move(accepted), /*connecting=*/false,
                                                StreamTransportOptions());
    transport_->Start(loop_, &host_);
    ASSERT_TRUE(transport_->ParkReads());
  }
  void TearDown() override {
    transport_.reset();
    ev_loop_destroy(loop_);
  }
  void PeerWrites(const std::string& bytes) {
    ASSERT_TRUE(
        peer_.BlockingWrite(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ok());
  }
  // Reads as Connection::ReadResponseAsCaller does: again after each bounded wait, until a
  // frame, an error or the deadline.
  Result<bool> ReadAsCaller(MonoTime deadline, std::string* frame) {
    while (true) {
      BlockSlice got;
      size_t bytes = 0;
      Result<bool> r = transport_->ReadFrameWhileParked(deadline, &got, &bytes);
      if (!r.ok()) return r;
      if (*r) {
        *frame = got.slice.ToString();
        return true;
      }
      if (MonoTime::Now() >= deadline) return false;
    }
  }
  bool Blocking() const { return (fcntl(fd_, F_GETFL) & O_NONBLOCK) == 0; }

  struct ev_loop* loop_ = nullptr;
  Socket peer_;
  int fd_ = -1;
  FrameHost host_;
  std::unique_ptr<TcpTransport> transport_;
};

TEST_F(TcpTransportParkedTest, TheCallerReadsItsFrameBlockingAndTheReactorNeverWaits) {
  EXPECT_FALSE(Blocking());
  const std::atomic<pid_t> caller_tid{CurrentTid()};
  std::thread peer([&] {
    // Once the caller waits in its blocking recv().
    EXPECT_TRUE(WaitUntilInSyscall(caller_tid, SYS_recvfrom, fd_)) << "the caller never waited";
    PeerWrites(RawFrame("response"));
  });
  std::string frame;
  Result<bool> got = ReadAsCaller(MonoTime::Now() + kLong, &frame);
  peer.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(*got);
  EXPECT_EQ("response", frame);
  ASSERT_TRUE(Blocking());  // switched by the caller's read, for good

  // The reactor's (or a writer's) writes: the peer does not read, the socket fills, and the
  // write that finds it full takes nothing instead of waiting for room.
  TransferQueue queue;
  constexpr size_t kBig = 16 * 1024 * 1024;
  BlockRef block = Block::Allocate(kBig);
  memset(block->data(), 'x', kBig);
  queue.push_back(new BytesTransfer(BlockSlice{block, Slice(block->data(), kBig)}));
  size_t written = 0;
  while (true) {
    Result<size_t> w = transport_->Write(queue, TransferQueue::kNoByteLimit);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    if (*w == 0) break;
    queue.front()->Advance(*w);
    written += *w;
    ASSERT_LT(written, kBig) << "16 MiB fit in the socket: nothing proven";
  }
  EXPECT_GT(written, 0u);
  queue.pop_front()->TransferAborted(Status::Aborted("test over"));

  // The reactor reads again: from the blocking socket, without waiting when it is empty.
  transport_->ResumeReads(/*read_now=*/true);
  for (int i = 0; i < 10; i++) ev_run(loop_, EVRUN_NOWAIT);
  EXPECT_TRUE(host_.frames.empty());
  PeerWrites(RawFrame("next"));
  const MonoTime deadline = MonoTime::Now() + kLong;
  while (host_.frames.empty() && MonoTime::Now() < deadline) ev_run(loop_, EVRUN_ONCE);
  EXPECT_EQ(std::vector<std::string>{"next"}, host_.frames);
  EXPECT_TRUE(host_.failures.empty());
}

TEST_F(TcpTransportParkedTest, CloseUnderCallerEndsABlockedRead) {
  Result<bool> got = false;
  std::atomic<pid_t> caller_tid{0};
  std::thread caller([&] {
    std::string frame;
    caller_tid = CurrentTid();
    got = ReadAsCaller(MonoTime::Max(), &frame);  // no deadline: only the close ends it
  });
  EXPECT_TRUE(WaitUntilInSyscall(caller_tid, SYS_recvfrom, fd_)) << "the caller never blocked";
  transport_->CloseUnderCaller();
  caller.join();
  EXPECT_TRUE(got.status().IsNetworkError()) << got.status().ToString();
}

std::atomic<int> signals_handled{0};
void CountSignal(int) { signals_handled++; }

TEST_F(TcpTransportParkedTest, ASignalDoesNotEndTheCallersRead) {
  // No SA_RESTART: a signal makes a blocked recv() fail with EINTR, which the read retries.
  struct sigaction action {};
  action.sa_handler = CountSignal;
  struct sigaction old {};
  ASSERT_EQ(0, sigaction(SIGUSR1, &action, &old));
  Result<bool> got = false;
  std::string frame;
  std::atomic<pid_t> caller_tid{0};
  std::thread caller([&] {
    caller_tid = CurrentTid();
    got = ReadAsCaller(MonoTime::Now() + kLong, &frame);
  });
  // Five signals, each to the caller blocked in recv() (again, after the one before).
  signals_handled = 0;
  for (int i = 0; i < 5; i++) {
    if (!WaitUntilInSyscall(caller_tid, SYS_recvfrom, fd_)) {
      ADD_FAILURE() << "signal " << i << ": the caller never blocked in recv()";
      break;
    }
    pthread_kill(caller.native_handle(), SIGUSR1);
    while (signals_handled.load() <= i) SleepFor(MonoDelta::FromMilliseconds(1));  // on the caller
  }
  PeerWrites(RawFrame("after signals"));
  caller.join();
  sigaction(SIGUSR1, &old, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got);
  EXPECT_EQ("after signals", frame);
}

TEST_F(TcpTransportParkedTest, DeadlinesEndTheReadWhateverTheTimeoutLeftOnTheSocket) {
  // A read without a deadline leaves the longest SO_RCVTIMEO on the socket; later reads with
  // nearer deadlines (one in the blocking stretch, one in the ppoll stretch) still end at them,
  // with nothing read, and a frame that then comes is read whole.
  PeerWrites(RawFrame("first"));
  std::string frame;
  ASSERT_TRUE(ReadAsCaller(MonoTime::Max(), &frame).value());
  for (const MonoDelta wait : {MonoDelta::FromMilliseconds(60), MonoDelta::FromMilliseconds(5)}) {
    const MonoTime deadline = MonoTime::Now() + wait;
    Result<bool> got = ReadAsCaller(deadline, &frame);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_FALSE(*got);
    EXPECT_GE(MonoTime::Now(), deadline);
  }
  // Half a frame before a deadline: it stays buffered for the next read.
  const std::string whole = RawFrame("split");
  PeerWrites(whole.substr(0, 3));
  EXPECT_FALSE(ReadAsCaller(MonoTime::Now() + MonoDelta::FromMilliseconds(30), &frame).value());
  PeerWrites(whole.substr(3));
  ASSERT_TRUE(ReadAsCaller(MonoTime::Now() + kLong, &frame).value());
  EXPECT_EQ("split", frame);
}

}  // namespace
}  // namespace rrpc::rpc
