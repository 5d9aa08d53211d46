// Socket: owns one file descriptor of a TCP socket (closed on destruction) and wraps the calls
// rrpc makes on it, each returning Status/Result with the peer in the message. Not thread-safe:
// a socket belongs to one thread at a time (a reactor, once its connection is registered).
#pragma once

#include <sys/uio.h>

#include <cstddef>

#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { Close(); }
  Socket(Socket&& o) noexcept : fd_(o.Release()) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      Close();
      fd_ = o.Release();
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // A non-blocking, close-on-exec TCP socket of the address's family.
  static Result<Socket> CreateTcp(int family);

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Close();

  Status SetNoDelay(bool on);
  // TCP keepalive: probes after `idle_s` seconds without traffic, every `interval_s`, `count`
  // unanswered ones declare the peer dead. idle_s <= 0 turns keepalive off.
  Status SetKeepAlive(int idle_s, int interval_s, int count);
  // TCP_USER_TIMEOUT: sent bytes unacknowledged for `ms` milliseconds close the connection
  // (ETIMEDOUT); 0 leaves the kernel's retransmission limit (about 15 minutes).
  Status SetUserTimeout(int ms);
  // SO_RCVLOWAT: readiness (poll, epoll) and wake-ups wait for `bytes` queued (the kernel may
  // cap it at half the receive buffer); 1 is the default.
  Status SetRecvLowWatermark(int bytes);
  Status SetReuseAddr(bool on);
  Status SetReusePort(bool on);
  Status SetNonBlocking(bool on);

  Status Bind(const Sockaddr& addr);
  Status Listen(int backlog);
  Result<Sockaddr> GetSocketAddress() const;
  Result<Sockaddr> GetPeerAddress() const;

  // Non-blocking accept: Socket (non-blocking, cloexec) and its peer, or an error whose
  // posix_code() is EAGAIN when nothing is pending.
  Status Accept(Socket* out, Sockaddr* peer);
  // Non-blocking connect: OK when connected or in progress (EINPROGRESS); the caller then waits
  // for writability and checks GetSockError().
  Status ConnectNonBlocking(const Sockaddr& addr);
  // The pending socket error (SO_ERROR), as a Status.
  Status GetSockError() const;

  // Reads up to `len` bytes. Returns bytes read (> 0), 0 when nothing is available (EAGAIN:
  // a non-blocking socket is empty, or a blocking one's SO_RCVTIMEO ran out), or an error; a
  // closed peer is Status::EndOfFile. Waits as the socket's mode says.
  Result<size_t> Recv(uint8_t* buf, size_t len);
  // Recv() scattered over `iov` (one recvmsg()): fills them in order, same results as Recv().
  Result<size_t> Readv(const iovec* iov, int iovcnt);
  // Writes from `iov`; returns bytes written, 0 on EAGAIN. Never raises SIGPIPE.
  Result<size_t> Writev(const iovec* iov, int iovcnt);
  // The same, never waiting whatever the socket's mode (MSG_DONTWAIT): a reactor's I/O on a
  // socket that a synchronous caller switched to blocking reads (tcp_transport_parked.cc).
  Result<size_t> RecvNoWait(uint8_t* buf, size_t len);
  Result<size_t> ReadvNoWait(const iovec* iov, int iovcnt);
  Result<size_t> WritevNoWait(const iovec* iov, int iovcnt);
  // Bounds each later blocking receive by `timeout` (SO_RCVTIMEO; the kernel rounds it up to
  // its clock tick; zero means no bound).
  Status SetRecvTimeout(MonoDelta timeout);

  // Blocking helpers for tests and tools (the socket must be blocking).
  // Bounds each later blocking connect, send and receive by `timeout` (SO_SNDTIMEO and
  // SO_RCVTIMEO): one that runs out of time fails (connect) or returns 0 bytes (Recv, Writev).
  Status SetIoTimeout(MonoDelta timeout);
  // Connects; TimedOut when the SetIoTimeout timeout expires first.
  Status BlockingConnect(const Sockaddr& addr);
  Status BlockingWrite(const uint8_t* buf, size_t len);
  Status BlockingRecv(uint8_t* buf, size_t len);  // exactly len bytes or an error

 private:
  int fd_ = -1;
};

}  // namespace rrpc
