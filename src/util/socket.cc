#include "util/socket.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

namespace rrpc {

namespace {

// The data path (Recv, Readv, Writev and their NoWait forms) calls the kernel through syscall(2),
// not glibc's recv()/sendmsg(): those are thread cancellation points that switch asynchronous
// cancellation on and off around each call, and rrpc never cancels a thread. Under a sanitizer the
// glibc wrappers stay: the sanitizers intercept them (TSAN takes a socket's send -> recv as a
// happens-before edge between threads, which a raw syscall would hide from it).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define RRPC_SOCKET_LIBC_WRAPPERS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer) || \
    __has_feature(memory_sanitizer)
#define RRPC_SOCKET_LIBC_WRAPPERS 1
#endif
#endif

ssize_t RecvNow(int fd, uint8_t* buf, size_t len, int flags) {
#ifdef RRPC_SOCKET_LIBC_WRAPPERS
  return ::recv(fd, buf, len, flags);
#else
  return syscall(SYS_recvfrom, fd, buf, len, flags, nullptr, nullptr);
#endif
}

ssize_t RecvmsgNow(int fd, msghdr* msg, int flags) {
#ifdef RRPC_SOCKET_LIBC_WRAPPERS
  return ::recvmsg(fd, msg, flags);
#else
  return syscall(SYS_recvmsg, fd, msg, flags);
#endif
}

ssize_t SendmsgNow(int fd, const msghdr* msg, int flags) {
#ifdef RRPC_SOCKET_LIBC_WRAPPERS
  return ::sendmsg(fd, msg, MSG_NOSIGNAL | flags);
#else
  return syscall(SYS_sendmsg, fd, msg, MSG_NOSIGNAL | flags);
#endif
}

Status SetIntOption(int fd, int level, int opt, int value, const char* name) {
  if (setsockopt(fd, level, opt, &value, sizeof(value)) != 0) {
    return Status::FromErrno(name, errno);
  }
  return Status::OK();
}
}  // namespace

Result<Socket> Socket::CreateTcp(int family) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("socket", errno);
  return Socket(fd);
}

void Socket::Close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

Status Socket::SetNoDelay(bool on) {
  return SetIntOption(fd_, IPPROTO_TCP, TCP_NODELAY, on, "setsockopt(TCP_NODELAY)");
}
Status Socket::SetKeepAlive(int idle_s, int interval_s, int count) {
  if (idle_s <= 0)
    return SetIntOption(fd_, SOL_SOCKET, SO_KEEPALIVE, 0, "setsockopt(SO_KEEPALIVE)");
  RRPC_RETURN_NOT_OK(SetIntOption(fd_, SOL_SOCKET, SO_KEEPALIVE, 1, "setsockopt(SO_KEEPALIVE)"));
  RRPC_RETURN_NOT_OK(
      SetIntOption(fd_, IPPROTO_TCP, TCP_KEEPIDLE, idle_s, "setsockopt(TCP_KEEPIDLE)"));
  RRPC_RETURN_NOT_OK(SetIntOption(fd_, IPPROTO_TCP, TCP_KEEPINTVL, std::max(1, interval_s),
                                  "setsockopt(TCP_KEEPINTVL)"));
  return SetIntOption(fd_, IPPROTO_TCP, TCP_KEEPCNT, std::max(1, count), "setsockopt(TCP_KEEPCNT)");
}
Status Socket::SetUserTimeout(int ms) {
  return SetIntOption(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, std::max(0, ms),
                      "setsockopt(TCP_USER_TIMEOUT)");
}
Status Socket::SetRecvLowWatermark(int bytes) {
  return SetIntOption(fd_, SOL_SOCKET, SO_RCVLOWAT, bytes, "setsockopt(SO_RCVLOWAT)");
}
Status Socket::SetReuseAddr(bool on) {
  return SetIntOption(fd_, SOL_SOCKET, SO_REUSEADDR, on, "setsockopt(SO_REUSEADDR)");
}
Status Socket::SetReusePort(bool on) {
  return SetIntOption(fd_, SOL_SOCKET, SO_REUSEPORT, on, "setsockopt(SO_REUSEPORT)");
}

Status Socket::SetNonBlocking(bool on) {
  int flags = fcntl(fd_, F_GETFL, 0);
  if (flags < 0) return Status::FromErrno("fcntl(F_GETFL)", errno);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd_, F_SETFL, flags) < 0) return Status::FromErrno("fcntl(F_SETFL)", errno);
  return Status::OK();
}

Status Socket::Bind(const Sockaddr& addr) {
  if (::bind(fd_, addr.addr(), addr.addrlen()) != 0) {
    return Status::FromErrno("bind", errno, addr.ToString());
  }
  return Status::OK();
}

Status Socket::Listen(int backlog) {
  if (::listen(fd_, backlog) != 0) return Status::FromErrno("listen", errno);
  return Status::OK();
}

Result<Sockaddr> Socket::GetSocketAddress() const {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Status::FromErrno("getsockname", errno);
  }
  return Sockaddr::FromRaw(reinterpret_cast<sockaddr*>(&ss), len);
}

Result<Sockaddr> Socket::GetPeerAddress() const {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Status::FromErrno("getpeername", errno);
  }
  return Sockaddr::FromRaw(reinterpret_cast<sockaddr*>(&ss), len);
}

Status Socket::Accept(Socket* out, Sockaddr* peer) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return Status::FromErrno("accept", errno);
  *out = Socket(fd);
  *peer = Sockaddr::FromRaw(reinterpret_cast<sockaddr*>(&ss), len);
  return Status::OK();
}

Status Socket::ConnectNonBlocking(const Sockaddr& addr) {
  if (::connect(fd_, addr.addr(), addr.addrlen()) == 0 || errno == EINPROGRESS) {
    return Status::OK();
  }
  return Status::FromErrno("connect", errno, addr.ToString());
}

Status Socket::GetSockError() const {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return Status::FromErrno("getsockopt(SO_ERROR)", errno);
  }
  if (err != 0) return Status::FromErrno("connect", err);
  return Status::OK();
}

namespace {
// One body per call and mode, the flags a constant in each (the data path stays branch-free).
template <int kFlags>
Result<size_t> RecvLoop(int fd, uint8_t* buf, size_t len) {
  while (true) {
    ssize_t n = RecvNow(fd, buf, len, kFlags);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return Status::EndOfFile("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Status::FromErrno("recv", errno);
  }
}

template <int kFlags>
Result<size_t> ReadvLoop(int fd, const iovec* iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = iovcnt;
  while (true) {
    ssize_t n = RecvmsgNow(fd, &msg, kFlags);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return Status::EndOfFile("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Status::FromErrno("recvmsg", errno);
  }
}

template <int kFlags>
Result<size_t> WritevLoop(int fd, const iovec* iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = iovcnt;
  while (true) {
    ssize_t n = SendmsgNow(fd, &msg, kFlags);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Status::FromErrno("sendmsg", errno);
  }
}
}  // namespace

Result<size_t> Socket::Recv(uint8_t* buf, size_t len) { return RecvLoop<0>(fd_, buf, len); }
Result<size_t> Socket::Readv(const iovec* iov, int iovcnt) {
  return ReadvLoop<0>(fd_, iov, iovcnt);
}
Result<size_t> Socket::Writev(const iovec* iov, int iovcnt) {
  return WritevLoop<0>(fd_, iov, iovcnt);
}
Result<size_t> Socket::RecvNoWait(uint8_t* buf, size_t len) {
  return RecvLoop<MSG_DONTWAIT>(fd_, buf, len);
}
Result<size_t> Socket::ReadvNoWait(const iovec* iov, int iovcnt) {
  return ReadvLoop<MSG_DONTWAIT>(fd_, iov, iovcnt);
}
Result<size_t> Socket::WritevNoWait(const iovec* iov, int iovcnt) {
  return WritevLoop<MSG_DONTWAIT>(fd_, iov, iovcnt);
}

namespace {
// A socket timeout's timeval, rounded up: a bound under a microsecond must not become 0, which
// means none.
timeval SocketTimeout(MonoDelta timeout) {
  const int64_t us = (timeout.ToNanoseconds() + 999) / 1000;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1000000);
  return tv;
}
}  // namespace

Status Socket::SetRecvTimeout(MonoDelta timeout) {
  const timeval tv = SocketTimeout(timeout);
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
    return Status::FromErrno("setsockopt(SO_RCVTIMEO)", errno);
  }
  return Status::OK();
}

Status Socket::SetIoTimeout(MonoDelta timeout) {
  RRPC_RETURN_NOT_OK(SetRecvTimeout(timeout));
  const timeval tv = SocketTimeout(timeout);
  if (setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return Status::FromErrno("setsockopt(SO_SNDTIMEO)", errno);
  }
  return Status::OK();
}

Status Socket::BlockingConnect(const Sockaddr& addr) {
  while (::connect(fd_, addr.addr(), addr.addrlen()) != 0) {
    if (errno == EINTR) continue;
    // Linux bounds a blocking connect by SO_SNDTIMEO and then reports EINPROGRESS.
    if (errno == EINPROGRESS) return Status::TimedOut("connect timed out", addr.ToString());
    return Status::FromErrno("connect", errno, addr.ToString());
  }
  return Status::OK();
}

Status Socket::BlockingWrite(const uint8_t* buf, size_t len) {
  while (len > 0) {
    ssize_t n = ::send(fd_, buf, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("send", errno);
    }
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

Status Socket::BlockingRecv(uint8_t* buf, size_t len) {
  while (len > 0) {
    ssize_t n = ::recv(fd_, buf, len, 0);
    if (n == 0) return Status::EndOfFile("connection closed by peer");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("recv", errno);
    }
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace rrpc
