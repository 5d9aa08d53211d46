// Socket's data path on real loopback sockets: the NoWait calls never wait, whatever the
// socket's mode (a reactor's I/O on a socket that a synchronous caller switched to blocking
// reads), and a blocking Recv() returns nothing once SO_RCVTIMEO runs out.
#include "util/socket.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <string>
#include <vector>

#include "util/testing/socket-test-util.h"

namespace rrpc {
namespace {

// Longer than any NoWait call takes however loaded the machine, short enough that a call that
// wrongly waits ends the test with a failure rather than hanging it.
constexpr MonoDelta kGuard = MonoDelta::FromSeconds(20);
constexpr MonoDelta kHalfGuard = MonoDelta::FromSeconds(10);

class SocketTest : public ::testing::Test {
 protected:
  // A connected pair, both blocking: the mode a caller leaves a client socket in.
  void SetUp() override {
    ASSERT_TRUE(ConnectLoopbackPair(&client_, &server_).ok());
    ASSERT_TRUE(server_.SetNonBlocking(false).ok());
    ASSERT_EQ(0, fcntl(client_.fd(), F_GETFL) & O_NONBLOCK);
    // A call that waited would end here, not hang.
    ASSERT_TRUE(client_.SetIoTimeout(kGuard).ok());
  }

  Socket client_, server_;
};

TEST_F(SocketTest, NoWaitReadsOfAnEmptyBlockingSocketReturnNothingAtOnce) {
  const MonoTime start = MonoTime::Now();
  uint8_t buf[64];
  Result<size_t> got = client_.RecvNoWait(buf, sizeof(buf));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(0u, *got);
  iovec iov[2] = {{buf, 32}, {buf + 32, 32}};
  got = client_.ReadvNoWait(iov, 2);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(0u, *got);
  EXPECT_LT(MonoTime::Now() - start, kHalfGuard);
  // Bytes that are there are read, scattered in order (one write: they arrive together).
  ASSERT_TRUE(server_.BlockingWrite(reinterpret_cast<const uint8_t*>("abcdef"), 6).ok());
  pollfd p{client_.fd(), POLLIN, 0};
  ASSERT_EQ(1, poll(&p, 1, static_cast<int>(kGuard.ToMilliseconds())));
  iovec parts[2] = {{buf, 3}, {buf + 32, 32}};
  got = client_.ReadvNoWait(parts, 2);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(6u, *got);
  EXPECT_EQ("abc", std::string(reinterpret_cast<char*>(buf), 3));
  EXPECT_EQ("def", std::string(reinterpret_cast<char*>(buf + 32), 3));
}

TEST_F(SocketTest, NoWaitWritesToAFullBlockingSocketTakeWhatFitsAndThenNothing) {
  // The peer does not read: the socket fills, and the write that finds it full returns 0 at
  // once instead of waiting for room.
  std::vector<uint8_t> chunk(256 * 1024, 'x');
  iovec iov{chunk.data(), chunk.size()};
  const MonoTime start = MonoTime::Now();
  size_t written = 0;
  for (int i = 0; i < 10000; i++) {
    Result<size_t> w = client_.WritevNoWait(&iov, 1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    if (*w == 0) break;
    written += *w;
  }
  EXPECT_GT(written, 0u);
  EXPECT_LT(MonoTime::Now() - start, kHalfGuard);
  Result<size_t> w = client_.WritevNoWait(&iov, 1);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(0u, *w);
}

TEST_F(SocketTest, ABlockingRecvReturnsNothingOnceItsTimeoutRunsOut) {
  ASSERT_TRUE(client_.SetRecvTimeout(MonoDelta::FromMilliseconds(10)).ok());
  uint8_t buf[8];
  Result<size_t> got = client_.Recv(buf, sizeof(buf));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(0u, *got);
  // A bound under a microsecond is still a bound (0 would mean none).
  ASSERT_TRUE(client_.SetRecvTimeout(MonoDelta::FromNanoseconds(1)).ok());
  got = client_.Recv(buf, sizeof(buf));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(0u, *got);
  // And the peer's close is the stream's end.
  server_.Close();
  got = client_.Recv(buf, sizeof(buf));
  EXPECT_TRUE(got.status().IsEndOfFile()) << got.status().ToString();
}

}  // namespace
}  // namespace rrpc
