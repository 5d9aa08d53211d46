// Test helpers that speak rrpc's wire format by hand over a blocking socket, so tests can send
// what a well-behaved peer never would (bad preambles, broken frames) and play a scripted server.
// docs/wire-format.md is the reference for every byte written here.
#pragma once

#include <google/protobuf/message_lite.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "rpc/core/constants.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/wire_codec.h"
#include "rpc/transport/frame-test-util.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "util/socket.h"

namespace rrpc::rpc {

// The bytes of one frame: length prefix, header, body, then `sidecars` appended as they are.
inline std::string FrameBytes(const google::protobuf::MessageLite& header,
                              const google::protobuf::MessageLite& body,
                              const std::string& sidecars = "") {
  BlockSlice head = SerializeFrameHead(header, body, sidecars.size(), 1u << 31).value();
  return head.slice.ToString() + sidecars;
}

// A call frame as a client sends it; `timeout_ms` 0 sends no deadline.
inline std::string CallFrame(int32_t call_id, const std::string& service, const std::string& method,
                             const google::protobuf::MessageLite& body, uint32_t timeout_ms = 0) {
  RequestHeader header;
  header.set_call_id(call_id);
  header.mutable_remote_method()->set_service_name(service);
  header.mutable_remote_method()->set_method_name(method);
  if (timeout_ms > 0) header.set_timeout_millis(timeout_ms);
  return FrameBytes(header, body);
}

// RawConnection: one blocking TCP socket to (or accepted from) an rrpc peer. Every read is
// bounded (SO_RCVTIMEO), so a test fails instead of hanging. Used by one test thread.
class RawConnection {
 public:
  // Connects to `addr`; check ok() before use.
  explicit RawConnection(const Sockaddr& addr) {
    int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status_ = Status::FromErrno("socket", errno);
      return;
    }
    socket_ = Socket(fd);
    if (::connect(fd, addr.addr(), addr.addrlen()) != 0) {
      status_ = Status::FromErrno("connect", errno, addr.ToString());
      return;
    }
    status_ = Init();
  }
  // Wraps an accepted socket (blocking or not: it is made blocking).
  explicit RawConnection(Socket accepted) : socket_(std::move(accepted)) { status_ = Init(); }

  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }
  int fd() const { return socket_.fd(); }

  Status Write(const std::string& bytes) {
    return socket_.BlockingWrite(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  // Client: "RRPC", `version`, flags 0.
  Status SendPreamble(uint8_t version = kWireVersion) {
    std::string p(reinterpret_cast<const char*>(kMagic), sizeof(kMagic));
    p.push_back(static_cast<char>(version));
    p.push_back('\0');
    return Write(p);
  }
  // Client: preamble, negotiation request, and the server's accepting reply. Without
  // `offer_cancellation`, a client older than CANCELLATION.
  Status Negotiate(bool offer_cancellation = true) {
    BlockSlice hello = BuildClientHello("raw-test-client", "", false, offer_cancellation);
    RRPC_RETURN_NOT_OK(Write(hello.slice.ToString()));
    std::string frame;
    RRPC_RETURN_NOT_OK(ReadFrame(&frame));
    NegotiatePB reply;
    return ParseServerReply(Slice(frame), &reply);
  }
  // Server: reads the preamble and the client's negotiation frame and accepts it. Unless
  // `accept_cancellation`, its reply leaves CANCELLATION out (as a server older than it), so the
  // client sends no cancel frames the script would have to read.
  Status AcceptNegotiation(bool accept_cancellation = false) {
    uint8_t preamble[kPreambleSize];
    RRPC_RETURN_NOT_OK(socket_.BlockingRecv(preamble, sizeof(preamble)));
    RRPC_RETURN_NOT_OK(CheckPreamble(Slice(preamble, kPreambleSize)));
    std::string frame;
    RRPC_RETURN_NOT_OK(ReadFrame(&frame));
    NegotiatePB request;
    RRPC_RETURN_NOT_OK(ParseClientNegotiation(Slice(frame), &request));
    if (!accept_cancellation) {
      NegotiatePB old = request;
      old.clear_supported_features();
      for (int f : request.supported_features()) {
        if (f != CANCELLATION) old.add_supported_features(static_cast<RpcFeatureFlag>(f));
      }
      request = old;
    }
    return Write(BuildServerReply(request, Status::OK(), {}).slice.ToString());
  }

  // Reads exactly `n` bytes.
  Status ReadBytes(size_t n, std::string* out) {
    out->resize(n);
    return socket_.BlockingRecv(reinterpret_cast<uint8_t*>(out->data()), n);
  }
  // Reads one frame; `content` gets the bytes after its length prefix.
  Status ReadFrame(std::string* content) {
    uint8_t prefix[kFrameLengthSize];
    RRPC_RETURN_NOT_OK(socket_.BlockingRecv(prefix, sizeof(prefix)));
    const uint32_t length = DecodeBigEndian32(prefix);
    if (length > (64u << 20)) return Status::Corruption("raw test peer: frame too large");
    content->resize(length);
    return socket_.BlockingRecv(reinterpret_cast<uint8_t*>(content->data()), length);
  }
  // Reads one frame and splits it (header parsed; body and sidecars as bytes).
  template <typename Header>
  Status ReadParsedFrame(Header* header, std::string* body, std::string* tail = nullptr) {
    std::string frame;
    RRPC_RETURN_NOT_OK(ReadFrame(&frame));
    Slice body_slice, tail_slice;
    RRPC_RETURN_NOT_OK(ParseFrame(Slice(frame), header, &body_slice, &tail_slice));
    *body = body_slice.ToString();
    if (tail != nullptr) *tail = tail_slice.ToString();
    return Status::OK();
  }

  // Stops sending (the peer reads EOF) but keeps reading.
  void ShutdownWrite() { ::shutdown(socket_.fd(), SHUT_WR); }
  // Both directions: a thread blocked writing or reading on it returns.
  void ShutdownBoth() { ::shutdown(socket_.fd(), SHUT_RDWR); }

  // True once the peer has closed the connection (EOF or reset) within `timeout`; whatever it
  // sent before closing is read and dropped. Bounded by `timeout`.
  bool WaitForClose(MonoDelta timeout = MonoDelta::FromSeconds(60)) {
    const MonoTime deadline = MonoTime::Now() + timeout;
    char buf[4096];
    while (true) {
      const MonoDelta left = deadline - MonoTime::Now();
      if (left.ToNanoseconds() <= 0) return false;
      pollfd p{socket_.fd(), POLLIN, 0};
      const int ready =
          ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.ToMilliseconds() + 1, 1000)));
      if (ready < 0 && errno != EINTR) return false;
      if (ready <= 0) continue;
      const ssize_t n = ::recv(socket_.fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0) return true;
      if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return true;
    }
  }

 private:
  Status Init() {
    RRPC_RETURN_NOT_OK(socket_.SetNonBlocking(false));
    timeval tv{30, 0};
    if (::setsockopt(socket_.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
      return Status::FromErrno("setsockopt(SO_RCVTIMEO)", errno);
    }
    return socket_.SetNoDelay(true);
  }

  Socket socket_;
  Status status_;
};

// A listening socket on 127.0.0.1 (blocking accept, bounded by poll) for scripted servers.
class RawListener {
 public:
  RawListener() {
    Result<Socket> sock = Socket::CreateTcp(AF_INET);
    if (!sock.ok()) {
      status_ = sock.status();
      return;
    }
    socket_ = std::move(sock).value();
    status_ = socket_.Bind(Sockaddr::Loopback(0));
    if (status_.ok()) status_ = socket_.Listen(16);
    if (status_.ok()) {
      Result<Sockaddr> a = socket_.GetSocketAddress();
      if (a.ok()) {
        addr_ = *a;
      } else {
        status_ = a.status();
      }
    }
  }
  const Status& status() const { return status_; }
  const Sockaddr& addr() const { return addr_; }

  // Waits up to `timeout` for one connection.
  Result<Socket> Accept(MonoDelta timeout = MonoDelta::FromSeconds(60)) {
    pollfd p{socket_.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.ToMilliseconds())) <= 0) {
      return Status::TimedOut("raw listener: no connection");
    }
    Socket out;
    Sockaddr peer;
    RRPC_RETURN_NOT_OK(socket_.Accept(&out, &peer));
    return out;
  }

 private:
  Socket socket_;
  Sockaddr addr_;
  Status status_;
};

}  // namespace rrpc::rpc
