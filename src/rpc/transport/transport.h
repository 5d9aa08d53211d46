// Transport: how a connection moves bytes: plain TCP now, TLS and RDMA later. A connection owns
// exactly one. Recv runs on its reactor thread; Writev runs under the connection's write lock on
// the reactor or on a worker writing a lone response, so it may overlap a Recv: a transport
// whose reads and writes share state (a TLS session) must not allow that (see
// Connection::TryWriteLoneResponse).
#pragma once

#include <sys/uio.h>

#include <memory>

#include "util/socket.h"
#include "util/status.h"

namespace rrpc::rpc {

class Transport {
 public:
  virtual ~Transport() = default;
  // Bytes read (> 0), 0 when nothing is available now, EndOfFile when the peer closed.
  virtual Result<size_t> Recv(uint8_t* buf, size_t len) = 0;
  // Bytes written (possibly fewer than offered), 0 when the socket is full.
  virtual Result<size_t> Writev(const iovec* iov, int iovcnt) = 0;
  // The descriptor the reactor watches.
  virtual int fd() const = 0;
  virtual const char* name() const = 0;
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(Socket socket) : socket_(std::move(socket)) {}
  Result<size_t> Recv(uint8_t* buf, size_t len) override { return socket_.Recv(buf, len); }
  Result<size_t> Writev(const iovec* iov, int iovcnt) override {
    return socket_.Writev(iov, iovcnt);
  }
  int fd() const override { return socket_.fd(); }
  const char* name() const override { return "tcp"; }
  Socket* socket() { return &socket_; }

 private:
  Socket socket_;
};

}  // namespace rrpc::rpc
