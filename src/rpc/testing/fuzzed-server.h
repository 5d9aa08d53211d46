// What the connection fuzz targets (server_connection-fuzz, tls_connection-fuzz) do to the live
// server they fuzz, apart from the input itself: start it, send bytes on a connection of their own
// and wait for the close, check that what came back is well-formed response frames, check that a
// normal client is still served, and, when a check fails, say why (the server's last log lines).
//
// Every wait is a poll() on a non-blocking socket against one deadline for the whole exchange. A
// signal only interrupts the poll, which is repeated: libFuzzer interrupts the target with SIGALRM
// now and then (src/util/fuzz_main.cc), and a blocking call would take that for the server's
// answer. Used by the fuzz target's one thread (the log tail is thread-safe: the server's threads
// log).
#pragma once

#include <glog/logging.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>

#include "rpc/core/wire_codec.h"
#include "rpc/testing/rtest.rrpc.h"
#include "rpc/testing/test-echo-service.h"
#include "rpc/testing/test-stream-service.h"
#include "rpc/transport/frame_format.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/sockaddr.h"
#include "util/fuzz_check.h"

namespace rrpc::rpc::fuzzing {

// How long the server may take to answer and close one input's connection, and to serve a call.
inline constexpr int kServerTimeoutSeconds = 10;

// Keeps the last lines the process logs (the server's, mostly: why it closed a connection) and
// logs nothing anywhere else, so a failed check can print the server's side of the story.
// Install() once, before the server starts; it lives for the process.
class ServerLogTail final : public google::LogSink {
 public:
  static ServerLogTail* Install(const char* program) {
    FLAGS_minloglevel = 0;
    FLAGS_logtostderr = false;
    FLAGS_stderrthreshold = google::GLOG_FATAL;
    google::InitGoogleLogging(program);
    for (int severity = google::GLOG_INFO; severity <= google::GLOG_FATAL; severity++) {
      google::SetLogDestination(severity, "");  // no log files
    }
    // Why each server connection closed (Connection::Shutdown logs it at VLOG 1).
    google::SetVLOGLevel("connection", 1);
    static ServerLogTail* tail = new ServerLogTail;  // lives for the process
    google::AddLogSink(tail);
    return tail;
  }

  void send(google::LogSeverity, const char*, const char* base_filename, int line,
            const struct ::tm*, const char* message, size_t message_len) override {
    MutexLock l(mu_);
    lines_.push_back(std::string(base_filename) + ":" + std::to_string(line) + " " +
                     std::string(message, message_len));
    if (lines_.size() > kLines) lines_.pop_front();
  }

  void Print() const {
    MutexLock l(mu_);
    fprintf(stderr, "the server's last %zu log lines:\n", lines_.size());
    for (const std::string& line : lines_) fprintf(stderr, "  %s\n", line.c_str());
  }

 private:
  static constexpr size_t kLines = 12;
  mutable Mutex mu_;
  std::deque<std::string> lines_ RRPC_GUARDED_BY(mu_);
};

// The server a connection fuzz target feeds: `options` (its name and security) with one reactor,
// two workers and frames up to 1 MiB, serving the echo service (sleeps ignored) on a loopback
// port, written to *addr.
inline std::shared_ptr<Messenger> StartEchoServer(MessengerOptions options, Sockaddr* addr) {
  options.num_reactors = 1;
  options.num_workers = 2;
  options.max_message_size = 1 << 20;
  std::shared_ptr<Messenger> server = MessengerBuilder(options).Build().value();
  auto service = std::make_unique<TestEchoService>(TestEchoService::Sleeps::kIgnored);
  RRPC_FUZZ_CHECK(server->RegisterService(std::move(service)).ok());
  RRPC_FUZZ_CHECK(server->RegisterService(std::make_unique<TestStreamService>()).ok());
  RRPC_FUZZ_CHECK(server->Listen(Sockaddr::Loopback(0), addr).ok());
  return server;
}

// Prints `what` failed, and the server's log tail when there is one; aborts (the input is kept).
[[noreturn]] inline void Fail(const std::string& what, const ServerLogTail* tail) {
  fprintf(stderr, "%s\n", what.c_str());
  if (tail != nullptr) tail->Print();
  abort();
}

// Waits until `fd` is ready for `events` (or has an error the next call reports). Past `deadline`
// the server hung: fails, saying what it did not do.
inline void WaitUntilReady(int fd, short events, MonoTime deadline, const char* server_did_not,
                           const ServerLogTail* tail) {
  while (true) {
    const int64_t left_ms = (deadline - MonoTime::Now()).ToMilliseconds();
    if (left_ms <= 0) {
      Fail(std::string("server did not ") + server_did_not + " within " +
               std::to_string(kServerTimeoutSeconds) + " s",
           tail);
    }
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left_ms));
    if (n > 0) return;
    if (n < 0 && errno != EINTR) Fail(std::string("poll: ") + strerror(errno), tail);
  }
}

// A non-blocking TCP connection to `addr`, connected (loopback: at once, or by the deadline).
inline int Connect(const Sockaddr& addr, MonoTime deadline, const ServerLogTail* tail) {
  const int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  RRPC_FUZZ_CHECK(fd >= 0);
  if (::connect(fd, addr.addr(), addr.addrlen()) != 0) {
    RRPC_FUZZ_CHECK(errno == EINPROGRESS);
    WaitUntilReady(fd, POLLOUT, deadline, "accept the connection", tail);
    int error = 0;
    socklen_t len = sizeof(error);
    RRPC_FUZZ_CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0);
  }
  return fd;
}

// Writes `bytes` to a new connection, shuts the write side and reads until the server closes;
// returns what it sent. The server may close before taking it all (a refusal): that is fine, a
// server that neither reads nor closes is not.
inline std::string ExchangeRaw(const Sockaddr& addr, const std::string& bytes,
                               const ServerLogTail* tail) {
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(kServerTimeoutSeconds);
  const int fd = Connect(addr, deadline, tail);
  std::string received;
  size_t written = 0;
  bool write_shut = false;
  while (true) {
    if (written == bytes.size() && !write_shut) {
      ::shutdown(fd, SHUT_WR);
      write_shut = true;
    }
    const short events = static_cast<short>(POLLIN | (write_shut ? 0 : POLLOUT));
    WaitUntilReady(fd, events, deadline, write_shut ? "close the connection" : "read the input",
                   tail);
    if (!write_shut) {
      const ssize_t n =
          ::send(fd, bytes.data() + written, bytes.size() - written, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) written += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN && errno != EINTR) written = bytes.size();  // closed early
    }
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      received.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      break;  // closed or reset
    }
  }
  ::close(fd);
  return received;
}

// The server only ever sends whole, well-formed response frames (the last one may be cut short
// by the close).
inline void CheckResponseFrames(const std::string& bytes) {
  size_t pos = 0;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  while (bytes.size() - pos >= kFrameLengthSize) {
    const uint32_t length = DecodeBigEndian32(p + pos);
    RRPC_FUZZ_CHECK(length > 0);
    if (bytes.size() - pos - kFrameLengthSize < length) break;
    ResponseHeader header;
    Slice body, tail;
    RRPC_FUZZ_CHECK(
        ParseFrame(Slice(p + pos + kFrameLengthSize, length), &header, &body, &tail).ok());
    pos += kFrameLengthSize + length;
  }
}

// A normal client (`client`, TLS or not as the server wants) still gets its echo answered.
inline void CheckStillServes(const std::shared_ptr<Messenger>& client, const Sockaddr& addr,
                             const ServerLogTail* tail) {
  rtest::EchoServiceProxy proxy(client, addr);
  rtest::EchoRequestPB req;
  req.set_data("still there?");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(kServerTimeoutSeconds));
  const Status st = proxy.Echo(req, &resp, &ctl);
  if (!st.ok()) Fail("server stopped serving: " + st.ToString(), tail);
  RRPC_FUZZ_CHECK(resp.data() == "still there?");
}

}  // namespace rrpc::rpc::fuzzing
