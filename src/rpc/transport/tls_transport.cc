#include "rpc/transport/tls_transport.h"

#include <glog/logging.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "rpc/transport/frame_delivery.h"

namespace rrpc::rpc {

namespace {

// SSL_read calls per readable event before yielding to other connections (each returns at most
// one 16 KiB record).
constexpr int kMaxReadsPerEvent = 16;
// iovecs gathered per write, and the most bytes one SSL_write takes.
constexpr int kMaxIovecs = 64;
constexpr size_t kMaxWriteBytes = 256 * 1024;

using BioState = TlsTransport::SocketBioState;

// ---- A BIO over the non-blocking socket that first replays the bytes read before TLS began.
// OpenSSL's socket BIO cannot replay; memory BIOs would cost a copy of every record.

int BioRead(BIO* bio, char* out, int len) {
  auto* st = static_cast<BioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  if (st->replay_pos < st->replay.size()) {
    const size_t n = std::min(static_cast<size_t>(len), st->replay.size() - st->replay_pos);
    memcpy(out, st->replay.data() + st->replay_pos, n);
    st->replay_pos += n;
    if (st->replay_pos == st->replay.size()) {
      std::string().swap(st->replay);
      st->replay_pos = 0;
    }
    return static_cast<int>(n);
  }
  ssize_t n;
  do {
    n = recv(st->fd, out, static_cast<size_t>(len), 0);
  } while (n < 0 && errno == EINTR);
  if (n >= 0) return static_cast<int>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    BIO_set_retry_read(bio);
  } else {
    st->last_errno = errno;
  }
  return -1;
}

int BioWrite(BIO* bio, const char* in, int len) {
  auto* st = static_cast<BioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  ssize_t n;
  do {
    n = send(st->fd, in, static_cast<size_t>(len), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n >= 0) return static_cast<int>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    BIO_set_retry_write(bio);
  } else {
    st->last_errno = errno;
  }
  return -1;
}

long BioCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int BioCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "rrpc socket");
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    return m;
  }();
  return method;
}

// One gather buffer per reactor thread: SSL_write encrypts out of it at once, and only the bytes
// of a write the socket does not take are copied into the connection's own pending buffer.
std::string& GatherBuffer() {
  thread_local std::string buffer;
  return buffer;
}

}  // namespace

Result<std::unique_ptr<Transport>> TlsTransport::NewClient(Socket socket, const Sockaddr& remote,
                                                           const security::TlsContext& context,
                                                           const std::string& server_name,
                                                           const StreamTransportOptions& options) {
  RRPC_ASSIGN_OR_RETURN(SSL * ssl, context.NewClientSsl(server_name, remote));
  return std::unique_ptr<Transport>(
      new TlsTransport(std::move(socket), ssl, Phase::kConnecting, "", options));
}

Result<std::unique_ptr<Transport>> TlsTransport::NewServer(DetachedStream stream,
                                                           const security::TlsContext& context,
                                                           const StreamTransportOptions& options) {
  RRPC_ASSIGN_OR_RETURN(SSL * ssl, context.NewServerSsl());
  return std::unique_ptr<Transport>(new TlsTransport(
      std::move(stream.socket), ssl, Phase::kHandshaking, std::move(stream.unread), options));
}

TlsTransport::TlsTransport(Socket socket, SSL* ssl, Phase phase, std::string replay,
                           const StreamTransportOptions& options)
    : socket_(std::move(socket)),
      ssl_(ssl),
      reader_(options.max_frame_size, options.read_block_size),
      phase_(phase) {
  bio_state_.fd = socket_.fd();
  bio_state_.replay = std::move(replay);
  BIO* bio = BIO_new(SocketBioMethod());
  BIO_set_data(bio, &bio_state_);
  SSL_set_bio(ssl_, bio, bio);  // the SSL owns the BIO
  // A write the socket did not take is retried from the pending copy, not the gather buffer.
  SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

TlsTransport::~TlsTransport() {
  Close();
  SSL_free(ssl_);
}

TransportCapabilities TlsTransport::capabilities() const {
  TransportCapabilities caps;
  // One SSL session serves both directions, but every SSL call holds ssl_mu_: a worker's
  // SSL_write of a lone response waits at most for one SSL_read of the reactor.
  caps.concurrent_write = true;
  // The client is connected only once the handshake is done: calls behind the hello are
  // encrypted like it.
  caps.calls_may_follow_hello = true;
  return caps;
}

TransportSecurity TlsTransport::security() const {
  TransportSecurity s;
  s.encrypted = phase_ == Phase::kEstablished;
  if (s.encrypted) s.peer_user = security::VerifiedPeerUser(ssl_);
  return s;
}

void TlsTransport::Describe(std::vector<std::pair<std::string, std::string>>* out) const {
  if (phase_ != Phase::kEstablished) return;
  out->emplace_back("tls_version", SSL_get_version(ssl_));
  out->emplace_back("tls_cipher", SSL_get_cipher_name(ssl_));
  out->emplace_back("tls_resumed", SSL_session_reused(ssl_) ? "yes" : "no");
  const std::string user = security::VerifiedPeerUser(ssl_);
  if (!user.empty()) out->emplace_back("tls_peer", user);
}

void TlsTransport::Start(struct ev_loop* loop, TransportHost* host) {
  loop_ = loop;
  host_ = host;
  ev_io_init(&read_watcher_, &TlsTransport::OnReadable, socket_.fd(), EV_READ);
  read_watcher_.data = this;
  ev_io_init(&write_watcher_, &TlsTransport::OnWritable, socket_.fd(), EV_WRITE);
  write_watcher_.data = this;
  if (phase_ == Phase::kConnecting) {
    UpdateWatchers();  // writable means the connect finished (or failed)
    return;
  }
  socket_.SetNoDelay(true);
  ContinueHandshake();  // the server has the ClientHello's first bytes already
}

Status TlsTransport::ExpectPreamble(size_t bytes) {
  preamble_bytes_ = bytes;
  return Status::OK();
}

void TlsTransport::FinishConnect() {
  Status s = socket_.GetSockError();
  if (!s.ok()) {
    Fail(s);
    return;
  }
  socket_.SetNoDelay(true);
  phase_ = Phase::kHandshaking;
  ContinueHandshake();
}

void TlsTransport::ContinueHandshake() {
  int ret, err = SSL_ERROR_NONE;
  Status failure;
  {
    MutexLock lock(ssl_mu_);
    ERR_clear_error();
    ret = SSL_do_handshake(ssl_);
    if (ret != 1) {
      err = SSL_get_error(ssl_, ret);
      if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
        failure = SslError(ret, "TLS handshake");
      }
    }
  }
  if (ret == 1) {
    phase_ = Phase::kEstablished;
    handshake_wants_write_ = false;
    UpdateWatchers();
    if (SSL_is_server(ssl_) == 0) {
      host_->OnTransportConnected();
      if (phase_ != Phase::kEstablished) return;
    }
    ReadRecords();  // application data may have come with the last handshake flight
    return;
  }
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    handshake_wants_write_ = err == SSL_ERROR_WANT_WRITE;
    UpdateWatchers();
    return;
  }
  Fail(failure);
}

Status TlsTransport::SslError(int ret, const char* what) {
  const int err = SSL_get_error(ssl_, ret);
  std::string detail;
  if (err == SSL_ERROR_SYSCALL) {
    detail =
        bio_state_.last_errno != 0 ? strerror(bio_state_.last_errno) : "connection closed by peer";
    ERR_clear_error();
  } else if (err == SSL_ERROR_ZERO_RETURN) {
    detail = "connection closed by peer";
  } else {
    detail = security::OpenSslErrors();
  }
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    detail += std::string("; certificate verification: ") + X509_verify_cert_error_string(verify);
  }
  return Status::NetworkError(std::string(what) + " failed", detail);
}

void TlsTransport::Fail(const Status& s) {
  if (phase_ == Phase::kClosed) return;
  host_->OnTransportFailed(s);
}

void TlsTransport::OnReadable(struct ev_loop*, ev_io* w, int) {
  static_cast<TlsTransport*>(w->data)->HandleReadable();
}

void TlsTransport::OnWritable(struct ev_loop*, ev_io* w, int) {
  static_cast<TlsTransport*>(w->data)->HandleWritable();
}

void TlsTransport::HandleReadable() {
  if (phase_ == Phase::kHandshaking) {
    ContinueHandshake();
    return;
  }
  if (phase_ != Phase::kEstablished) return;
  bool write_wants_read;
  {
    MutexLock lock(ssl_mu_);
    write_wants_read = write_wants_read_;
  }
  if (write_wants_read) {
    Result<bool> done = FlushPendingLocked();
    if (!done.ok()) {
      Fail(done.status());
      return;
    }
    if (*done && wants_writable_) {
      wants_writable_ = false;
      UpdateWatchers();
      host_->OnWritable();
      if (phase_ != Phase::kEstablished) return;
    }
  }
  if (!reads_paused_) ReadRecords();
}

void TlsTransport::HandleWritable() {
  if (phase_ == Phase::kConnecting) {
    FinishConnect();
    return;
  }
  if (phase_ == Phase::kHandshaking) {
    ContinueHandshake();
    return;
  }
  if (phase_ != Phase::kEstablished) return;
  if (read_wants_write_) {
    ReadRecords();
    if (phase_ != Phase::kEstablished) return;
  }
  if (HoldsUnsentBytes()) {
    Result<bool> done = FlushPendingLocked();
    if (!done.ok()) {
      Fail(done.status());
      return;
    }
    if (!*done) {
      UpdateWatchers();
      return;
    }
  }
  if (wants_writable_) {
    wants_writable_ = false;
    UpdateWatchers();
    host_->OnWritable();
    return;
  }
  UpdateWatchers();
}

void TlsTransport::ReadRecords() {
  read_wants_write_ = false;
  int reads = 0;
  while (phase_ == Phase::kEstablished && !reads_paused_) {
    if (reads++ == kMaxReadsPerEvent) {
      // OpenSSL may hold records the socket will not signal again: come back next iteration.
      ev_feed_event(loop_, &read_watcher_, EV_READ);
      return;
    }
    uint8_t* const buf = reader_.writable_data();  // first: it makes the room
    const size_t room = std::min<size_t>(reader_.writable_size(), INT_MAX);
    int n, err = SSL_ERROR_NONE;
    Status failure;
    {
      // A worker may be in SSL_write (concurrent_write): one SSL call at a time.
      MutexLock lock(ssl_mu_);
      ERR_clear_error();
      n = SSL_read(ssl_, buf, static_cast<int>(room));
      if (n <= 0) {
        err = SSL_get_error(ssl_, n);
        if (err == SSL_ERROR_SSL || err == SSL_ERROR_SYSCALL) failure = SslError(n, "TLS read");
      }
    }
    if (n <= 0) {
      if (err == SSL_ERROR_WANT_READ) {
        UpdateWatchers();
        return;
      }
      if (err == SSL_ERROR_WANT_WRITE) {
        read_wants_write_ = true;
        UpdateWatchers();
        return;
      }
      if (err == SSL_ERROR_ZERO_RETURN) {
        Fail(Status::NetworkError("connection closed by peer"));
        return;
      }
      Fail(failure.ok() ? Status::NetworkError("TLS read failed") : failure);
      return;
    }
    reader_.Commit(static_cast<size_t>(n));
    host_->OnBytesReceived(static_cast<size_t>(n), MonoTime::Now());
    if (phase_ != Phase::kEstablished) return;
    DeliverBuffered();
  }
}

void TlsTransport::DeliverBuffered() {
  DeliverFrames(&reader_, &preamble_bytes_, host_,
                [this] { return phase_ == Phase::kEstablished; });
}

Result<bool> TlsTransport::FlushPendingLocked() {
  MutexLock lock(ssl_mu_);
  if (pending_.empty()) return true;
  return FlushPending();
}

bool TlsTransport::HoldsUnsentBytes() const {
  MutexLock lock(ssl_mu_);
  return !pending_.empty();
}

Result<bool> TlsTransport::FlushPending() {
  write_wants_read_ = false;
  ERR_clear_error();
  const int ret = SSL_write(ssl_, pending_.data(), static_cast<int>(pending_.size()));
  if (ret > 0) {
    std::string().swap(pending_);  // an idle connection keeps no buffer
    return true;
  }
  const int err = SSL_get_error(ssl_, ret);
  if (err == SSL_ERROR_WANT_WRITE) return false;
  if (err == SSL_ERROR_WANT_READ) {
    write_wants_read_ = true;
    return false;
  }
  return SslError(ret, "TLS write");
}

Result<size_t> TlsTransport::Write(const TransferQueue& queue, size_t max_bytes) {
  if (phase_ != Phase::kEstablished) return size_t{0};
  // Never touches the watchers: this may run on a worker. The connection asks
  // HoldsUnsentBytes() and has the reactor watch for writability.
  MutexLock lock(ssl_mu_);
  if (!pending_.empty()) {
    RRPC_ASSIGN_OR_RETURN(bool done, FlushPending());
    if (!done) return size_t{0};
  }
  iovec iov[kMaxIovecs];
  const int n = queue.GatherIovecs(iov, kMaxIovecs, std::min(max_bytes, kMaxWriteBytes));
  if (n == 0) return size_t{0};
  // One SSL_write per batch (the gather stopped at its limit): a lone iovec goes as it is,
  // several are gathered into one buffer.
  const char* data;
  size_t len;
  if (n == 1) {
    data = static_cast<const char*>(iov[0].iov_base);
    len = iov[0].iov_len;
  } else {
    std::string& buf = GatherBuffer();
    buf.clear();
    for (int i = 0; i < n; i++) {
      buf.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    }
    data = buf.data();
    len = buf.size();
  }
  ERR_clear_error();
  const int ret = SSL_write(ssl_, data, static_cast<int>(len));
  if (ret > 0) return static_cast<size_t>(ret);
  const int err = SSL_get_error(ssl_, ret);
  if (err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ) {
    return SslError(ret, "TLS write");
  }
  // OpenSSL has encrypted (part of) these bytes and must be given the same ones again: we keep a
  // copy and finish it when the socket drains. The connection counts them as taken.
  write_wants_read_ = err == SSL_ERROR_WANT_READ;
  pending_.assign(data, len);
  return len;
}

void TlsTransport::NotifyWhenWritable(bool on) {
  wants_writable_ = on;
  UpdateWatchers();
}

void TlsTransport::PauseReading(bool paused) {
  const bool resumed = reads_paused_ && !paused;
  reads_paused_ = paused;
  UpdateWatchers();
  // Records OpenSSL buffered while paused are not signalled by the socket again.
  if (resumed && phase_ == Phase::kEstablished && loop_ != nullptr) {
    ev_feed_event(loop_, &read_watcher_, EV_READ);
  }
}

Result<DetachedStream> TlsTransport::Detach() {
  return Status::NotSupported("a TLS session cannot hand its socket to another transport");
}

void TlsTransport::Close() {
  if (phase_ == Phase::kClosed) return;
  const bool established = phase_ == Phase::kEstablished;
  phase_ = Phase::kClosed;
  if (loop_ != nullptr) {
    // Stopping also drops an event fed by ReadRecords() or PauseReading().
    ev_io_stop(loop_, &read_watcher_);
    ev_io_stop(loop_, &write_watcher_);
    read_active_ = write_active_ = false;
  }
  MutexLock lock(ssl_mu_);  // no worker writes after Close (write_closed_)
  if (established) {
    SSL_shutdown(ssl_);  // one try at close_notify; the socket closes either way
    ERR_clear_error();
  }
  socket_.Close();
  reader_.TakeBuffered();
  std::string().swap(pending_);
}

void TlsTransport::UpdateWatchers() {
  if (loop_ == nullptr) return;
  bool read = false, write = false;
  switch (phase_) {
    case Phase::kConnecting:
      write = true;
      break;
    case Phase::kHandshaking:
      read = !handshake_wants_write_;
      write = handshake_wants_write_;
      break;
    case Phase::kEstablished: {
      MutexLock lock(ssl_mu_);
      read = !reads_paused_ || write_wants_read_;
      write = wants_writable_ || !pending_.empty() || read_wants_write_;
      break;
    }
    case Phase::kClosed:
      break;
  }
  SetWatcher(&read_watcher_, &read_active_, read);
  SetWatcher(&write_watcher_, &write_active_, write);
}

void TlsTransport::SetWatcher(ev_io* w, bool* active, bool on) {
  if (on == *active) return;
  *active = on;
  if (on) {
    ev_io_start(loop_, w);
  } else {
    ev_io_stop(loop_, w);
  }
}

std::unique_ptr<Transport> TlsClientTransportFactory::NewServerTransport(Socket accepted) {
  ConfigureStreamSocket(&accepted, options_);
  return std::make_unique<TcpTransport>(std::move(accepted), /*connecting=*/false, options_);
}

Result<std::unique_ptr<Transport>> TlsClientTransportFactory::NewClientTransport(
    const Sockaddr& remote) {
  RRPC_ASSIGN_OR_RETURN(Socket sock, Socket::CreateTcp(remote.family()));
  ConfigureStreamSocket(&sock, options_);
  RRPC_RETURN_NOT_OK(sock.ConnectNonBlocking(remote));
  return TlsTransport::NewClient(std::move(sock), remote, *context_, server_name_, options_);
}

}  // namespace rrpc::rpc
