#include "bench/bench_raw_client.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "rpc/core/constants.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/wire_codec.h"
#include "rpc/security/tls_context.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/block.h"

namespace rrpc::bench {

namespace {

// Largest response frame accepted: rrpc's default maximum message size.
constexpr size_t kMaxFrameSize = 64 * 1024 * 1024;

// A blocking socket call that ran out of time reports EAGAIN: say so plainly.
Status Explain(const Status& s, const std::string& what) {
  if (s.posix_code() == EAGAIN || s.posix_code() == EWOULDBLOCK) {
    return Status::TimedOut(what + " timed out");
  }
  return s.CloneAndPrepend(what);
}

}  // namespace

std::string RawRpcConnection::PeerName() const {
  Result<Sockaddr> peer = socket_.GetPeerAddress();
  return peer.ok() ? peer->ToString() : std::string("server");
}

void RawRpcConnection::SslFree::operator()(SSL* ssl) const { SSL_free(ssl); }

bool RawRpcConnection::resumed() const { return ssl_ != nullptr && SSL_session_reused(ssl_.get()); }

Status RawRpcConnection::StartTls(const Sockaddr& server, const security::TlsContext& tls,
                                  SSL_SESSION** session) {
  RRPC_ASSIGN_OR_RETURN(SSL * ssl, tls.NewClientSsl("", server));
  ssl_.reset(ssl);
  session_slot_ = session;
  if (session != nullptr && *session != nullptr) SSL_set_session(ssl, *session);
  SSL_set_fd(ssl, socket_.fd());
  ERR_clear_error();
  if (SSL_connect(ssl) != 1) {
    return Status::NetworkError("TLS handshake with " + server.ToString() + " failed",
                                security::OpenSslErrors());
  }
  return Status::OK();
}

Result<size_t> RawRpcConnection::RecvSome(uint8_t* buf, size_t len) {
  if (ssl_ == nullptr) return socket_.Recv(buf, len);
  ERR_clear_error();
  const int n = SSL_read(ssl_.get(), buf, static_cast<int>(std::min<size_t>(len, 1 << 30)));
  if (n > 0) return static_cast<size_t>(n);
  const int err = SSL_get_error(ssl_.get(), n);
  if (err == SSL_ERROR_WANT_READ) return size_t{0};  // SO_RCVTIMEO expired
  if (err == SSL_ERROR_ZERO_RETURN) return Status::EndOfFile("closed");
  return Status::NetworkError("TLS read failed", security::OpenSslErrors());
}

Status RawRpcConnection::Open(const Sockaddr& server, MonoDelta io_timeout,
                              const std::string& client_name, bool await_reply,
                              const security::TlsContext* tls, SSL_SESSION** session) {
  CloseAbortively();
  timeout_ms_ = static_cast<uint32_t>(std::max<int64_t>(1, io_timeout.ToMilliseconds()));
  RRPC_ASSIGN_OR_RETURN(Socket sock, Socket::CreateTcp(server.family()));
  RRPC_RETURN_NOT_OK(sock.SetNonBlocking(false));
  RRPC_RETURN_NOT_OK(sock.SetIoTimeout(io_timeout));
  RRPC_RETURN_NOT_OK(sock.BlockingConnect(server));
  RRPC_RETURN_NOT_OK(sock.SetNoDelay(true));
  socket_ = std::move(sock);
  if (tls != nullptr) RRPC_RETURN_NOT_OK(StartTls(server, *tls, session));

  BlockSlice hello = rpc::BuildClientHello(client_name);
  reply_pending_ = true;
  if (!await_reply) {
    unsent_hello_ = hello.slice.ToString();
    return Status::OK();
  }
  iovec iov{const_cast<uint8_t*>(hello.slice.data()), hello.slice.size()};
  Status s = WriteAll(&iov, 1);
  if (!s.ok()) return Explain(s, "sending the negotiation request to " + server.ToString());
  reply_pending_ = false;
  std::string buf;
  size_t have = 0, used = 0;
  Slice frame;
  RRPC_RETURN_NOT_OK(ReadFrame(&buf, &have, &used, &frame));
  return CheckNegotiationReply(frame);
}

Status RawRpcConnection::CheckNegotiationReply(Slice frame) {
  rpc::NegotiatePB reply;
  return rpc::ParseServerReply(frame, &reply);
}

Status RawRpcConnection::Call(const std::string& service, const std::string& method,
                              const google::protobuf::Message& request, Slice request_sidecar,
                              google::protobuf::Message* response, std::string* scratch,
                              std::vector<Slice>* response_sidecars) {
  if (!is_open()) return Status::IllegalState("connection is not open");
  const int32_t call_id = next_call_id_;
  next_call_id_ = (next_call_id_ + 1) & 0x7fffffff;
  rpc::RequestHeader header;
  header.set_call_id(call_id);
  header.mutable_remote_method()->set_service_name(service);
  header.mutable_remote_method()->set_method_name(method);
  header.set_timeout_millis(timeout_ms_);
  if (!request_sidecar.empty()) header.add_sidecar_offsets(0);
  RRPC_ASSIGN_OR_RETURN(
      BlockSlice head,
      rpc::SerializeFrameHead(header, request, request_sidecar.size(), kMaxFrameSize));
  iovec iov[3];
  int iovcnt = 0;
  if (!unsent_hello_.empty()) {
    iov[iovcnt++] = {unsent_hello_.data(), unsent_hello_.size()};
  }
  iov[iovcnt++] = {const_cast<uint8_t*>(head.slice.data()), head.slice.size()};
  if (!request_sidecar.empty()) {
    iov[iovcnt++] = {const_cast<uint8_t*>(request_sidecar.data()), request_sidecar.size()};
  }
  RRPC_RETURN_NOT_OK(WriteAll(iov, iovcnt));
  unsent_hello_.clear();
  unsent_hello_.shrink_to_fit();

  size_t have = 0, used = 0;
  Slice frame;
  if (reply_pending_) {
    reply_pending_ = false;
    RRPC_RETURN_NOT_OK(ReadFrame(scratch, &have, &used, &frame));
    RRPC_RETURN_NOT_OK(CheckNegotiationReply(frame));
  }
  RRPC_RETURN_NOT_OK(ReadFrame(scratch, &have, &used, &frame));
  rpc::ResponseHeader response_header;
  Slice body, tail;
  RRPC_RETURN_NOT_OK(rpc::ParseFrame(frame, &response_header, &body, &tail));
  if (response_header.call_id() != call_id) {
    return Status::Corruption("response for call " + std::to_string(response_header.call_id()) +
                              ", expected call " + std::to_string(call_id));
  }
  if (response_header.is_error()) {
    rpc::ErrorStatusPB error;
    if (!error.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return Status::Corruption("error response does not parse");
    }
    return Status::RemoteError(rpc::ErrorStatusPB::RpcErrorCodePB_Name(error.code()),
                               error.message());
  }
  if (!response->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Status::Corruption("response does not parse", response->InitializationErrorString());
  }
  response_sidecars->clear();
  return rpc::SplitSidecars(tail, response_header.sidecar_offsets(), response_sidecars);
}

Status RawRpcConnection::WriteAll(iovec* iov, int iovcnt) {
  if (ssl_ != nullptr) {
    // One record run for the whole call, as rrpc's own TLS transport writes a batch.
    std::string gathered;
    for (int i = 0; i < iovcnt; i++) {
      gathered.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    }
    ERR_clear_error();
    if (SSL_write(ssl_.get(), gathered.data(), static_cast<int>(gathered.size())) <= 0) {
      return Status::NetworkError("TLS write to " + PeerName() + " failed",
                                  security::OpenSslErrors());
    }
    return Status::OK();
  }
  while (iovcnt > 0) {
    Result<size_t> written = socket_.Writev(iov, iovcnt);
    if (!written.ok()) return written.status().CloneAndPrepend("sending a call to " + PeerName());
    // A blocking socket writes nothing only when SO_SNDTIMEO expired.
    if (*written == 0) return Status::TimedOut("sending a call timed out", PeerName());
    size_t left = *written;
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      iovcnt--;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::OK();
}

Status RawRpcConnection::ReadFrame(std::string* buf, size_t* have, size_t* used, Slice* frame) {
  // Receives until `n` bytes from `*used` on are in `buf`.
  auto fill = [&](size_t n) -> Status {
    constexpr size_t kReadChunk = 4096;
    while (*have - *used < n) {
      const size_t room = std::max(*used + n, *have + kReadChunk);
      if (buf->size() < room) buf->resize(room);
      Result<size_t> got =
          RecvSome(reinterpret_cast<uint8_t*>(buf->data()) + *have, buf->size() - *have);
      if (!got.ok()) {
        Status s = got.status();
        if (s.IsEndOfFile()) s = Status::NetworkError("the server closed the connection");
        return Explain(s, "waiting for a response from " + PeerName());
      }
      // A blocking socket returns nothing only when SO_RCVTIMEO expired.
      if (*got == 0) return Status::TimedOut("waiting for a response from " + PeerName());
      *have += *got;
    }
    return Status::OK();
  };
  RRPC_RETURN_NOT_OK(fill(rpc::kFrameLengthSize));
  const uint32_t length =
      rpc::DecodeBigEndian32(reinterpret_cast<const uint8_t*>(buf->data()) + *used);
  if (length == 0 || length > kMaxFrameSize) {
    return Status::Corruption("response frame of " + std::to_string(length) + " bytes");
  }
  RRPC_RETURN_NOT_OK(fill(rpc::kFrameLengthSize + length));
  *frame =
      Slice(reinterpret_cast<const uint8_t*>(buf->data()) + *used + rpc::kFrameLengthSize, length);
  *used += rpc::kFrameLengthSize + length;
  return Status::OK();
}

void RawRpcConnection::CloseAbortively() {
  if (ssl_ != nullptr) {
    // Ended on purpose: without this, freeing the SSL marks its session "bad" (not resumable).
    SSL_set_shutdown(ssl_.get(), SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    if (session_slot_ != nullptr) {
      SSL_SESSION* next = SSL_get1_session(ssl_.get());
      if (next != nullptr && SSL_SESSION_is_resumable(next)) {
        if (*session_slot_ != nullptr) SSL_SESSION_free(*session_slot_);
        *session_slot_ = next;
      } else if (next != nullptr) {
        SSL_SESSION_free(next);
      }
    }
    ssl_.reset();  // no close_notify: the reset below ends the connection
  }
  if (!socket_.valid()) return;
  linger lg;
  lg.l_onoff = 1;
  lg.l_linger = 0;
  // Best effort: if it fails the close is merely graceful.
  (void)setsockopt(socket_.fd(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  socket_.Close();
}

}  // namespace rrpc::bench
