#include "rpc/transport/tcp_transport.h"

#include <glog/logging.h>

#include <algorithm>

#include "rpc/transport/frame_delivery.h"

namespace rrpc::rpc {

namespace {
// Reads per readable event before yielding to other connections (fairness).
constexpr int kMaxReadsPerEvent = 16;
// iovecs per writev: enough to batch many small frames in one syscall.
constexpr int kMaxIovecs = 64;
// WaitForRestOfFrame: at most this much is asked for at once (the kernel caps it at half the
// receive buffer anyway).
constexpr size_t kMaxLowWatermarkBytes = 4 * 1024 * 1024;
}  // namespace

TcpTransport::TcpTransport(Socket socket, bool connecting, const StreamTransportOptions& options)
    : socket_(std::move(socket)),
      reader_(options.max_frame_size, options.read_block_size),
      connecting_(connecting) {
  // A connecting transport is a client's; an accepted one a server's.
  if (connecting) reader_.set_copy_side(CopySide::kClient);
}

TcpTransport::TcpTransport(DetachedStream stream, const StreamTransportOptions& options)
    : TcpTransport(std::move(stream.socket), /*connecting=*/false, options) {
  reader_.Seed(Slice(stream.unread));
  seeded_ = !stream.unread.empty();
}

TcpTransport::~TcpTransport() { Close(); }

TransportCapabilities TcpTransport::capabilities() const {
  TransportCapabilities caps;
  // The kernel keeps a socket's directions apart: a worker's writev() may overlap our recv().
  caps.concurrent_write = true;
  // Nothing in the negotiation reply changes how bytes travel on plain TCP.
  caps.calls_may_follow_hello = true;
  return caps;
}

void TcpTransport::Start(struct ev_loop* loop, TransportHost* host) {
  loop_ = loop;
  host_ = host;
  ev_io_init(&read_watcher_, &TcpTransport::OnReadable, socket_.fd(), EV_READ);
  read_watcher_.data = this;
  ev_io_init(&write_watcher_, &TcpTransport::OnWritable, socket_.fd(), EV_WRITE);
  write_watcher_.data = this;
  if (connecting_) {
    SetWriteWatcher(true);  // writable means the connect finished (or failed)
    return;
  }
  // Small frames go out at once: responses and calls are latency-bound, and writes are batched
  // by the reactor already.
  socket_.SetNoDelay(true);
  SetReadWatcher(true);
  // Bytes handed over with the stream may hold whole frames the socket will not signal again.
  if (seeded_) ev_feed_event(loop_, &read_watcher_, EV_READ);
}

Status TcpTransport::ExpectPreamble(size_t bytes) {
  preamble_bytes_ = bytes;
  return Status::OK();
}

Result<size_t> TcpTransport::Write(const TransferQueue& queue, size_t max_bytes) {
  if (closed_ || connecting_) return size_t{0};
  iovec iov[kMaxIovecs];
  const int n = queue.GatherIovecs(iov, kMaxIovecs, max_bytes);
  if (n == 0) return size_t{0};
  return socket_.WritevNoWait(iov, n);
}

void TcpTransport::NotifyWhenWritable(bool on) {
  wants_writable_ = on;
  if (!connecting_) SetWriteWatcher(on);
}

void TcpTransport::PauseReading(bool paused) {
  reads_paused_ = paused;
  if (!connecting_) SetReadWatcher(!paused && !parked_);
}

Result<DetachedStream> TcpTransport::Detach() {
  if (closed_) return Status::IllegalState("transport closed");
  StopWatchers();
  SetRecvLowWatermark(1);  // the next transport expects the socket's default
  // The next transport expects the non-blocking socket it was made with. (Only an open client
  // connection's reads are ever a caller's, and no open connection is detached: defensive.)
  if (blocking_reads_) RRPC_RETURN_NOT_OK(socket_.SetNonBlocking(true));
  DetachedStream out;
  out.unread = reader_.TakeBuffered();
  out.socket = std::move(socket_);
  closed_ = true;
  return out;
}

void TcpTransport::Close() {
  if (closed_) return;
  closed_ = true;
  StopWatchers();
  socket_.Close();
  reader_.TakeBuffered();  // an idle connection holds no block
}

void TcpTransport::StopWatchers() {
  if (loop_ == nullptr) return;
  SetReadWatcher(false);
  SetWriteWatcher(false);
}

void TcpTransport::SetReadWatcher(bool on) {
  if (on == read_active_ || loop_ == nullptr) return;
  read_active_ = on;
  if (on) {
    ev_io_start(loop_, &read_watcher_);
  } else {
    ev_io_stop(loop_, &read_watcher_);
  }
}

void TcpTransport::SetWriteWatcher(bool on) {
  if (on == write_active_ || loop_ == nullptr) return;
  write_active_ = on;
  if (on) {
    ev_io_start(loop_, &write_watcher_);
  } else {
    ev_io_stop(loop_, &write_watcher_);
  }
}

void TcpTransport::OnReadable(struct ev_loop*, ev_io* w, int) {
  static_cast<TcpTransport*>(w->data)->HandleReadable();
}

void TcpTransport::OnWritable(struct ev_loop*, ev_io* w, int) {
  static_cast<TcpTransport*>(w->data)->HandleWritable();
}

void TcpTransport::HandleWritable() {
  if (connecting_) {
    FinishConnect();
    return;
  }
  SetWriteWatcher(false);
  wants_writable_ = false;
  host_->OnWritable();
}

void TcpTransport::FinishConnect() {
  connecting_ = false;
  Status s = socket_.GetSockError();
  if (!s.ok()) {
    SetWriteWatcher(false);
    host_->OnTransportFailed(s);
    return;
  }
  socket_.SetNoDelay(true);
  SetWriteWatcher(wants_writable_);
  SetReadWatcher(!reads_paused_);
  host_->OnTransportConnected();
}

void TcpTransport::HandleReadable() {
  if (seeded_) {
    seeded_ = false;
    DeliverBuffered();
  }
  for (int i = 0; i < kMaxReadsPerEvent && !closed_ && !reads_paused_; i++) {
    // ReadSpace() makes the room (a block full up to a partial length prefix is relocated), so
    // it is never empty: a read of 0 bytes would return 0, which reads as "peer closed". After a
    // frame that fills its block exactly it adds room for the next length prefix, so a drained
    // socket still shows as a short read (no recv() that only returns EAGAIN).
    iovec iov[2];
    const int parts = reader_.ReadSpace(iov);
    const size_t room = iov[0].iov_len + (parts > 1 ? iov[1].iov_len : 0);
    // NoWait: a caller may have switched the socket to blocking reads (tcp_transport_parked.cc).
    Result<size_t> got = parts > 1
                             ? socket_.ReadvNoWait(iov, parts)
                             : socket_.RecvNoWait(static_cast<uint8_t*>(iov[0].iov_base), room);
    if (!got.ok()) {
      Status s = got.status();
      if (s.IsEndOfFile()) s = Status::NetworkError("connection closed by peer");
      host_->OnTransportFailed(s);
      return;
    }
    if (*got == 0) break;
    reader_.Commit(*got);
    host_->OnBytesReceived(*got, MonoTime::Now());
    if (closed_) return;
    DeliverBuffered();
    if (*got < room) break;  // the socket is drained
  }
  // Every way out that leaves the connection open and its reads with the reactor (a frame may
  // have handed them to a caller, who owns the reader from then on): the bytes just read changed
  // what the pending frame still misses.
  if (!parked_) WaitForRestOfFrame();
}

void TcpTransport::SetLowWatermarkForFrame() {
  // A large frame arrives in several segments; woken by the first, the loop would read a part,
  // wait again, and wake again for each part. With the low watermark at the bytes missing, it
  // wakes once, when the frame is whole (the kernel checks at once whether they are already
  // there, so nothing that arrived meanwhile is missed). Exact: never more than the frame still
  // needs, which the peer must send to finish it. Two setsockopt() calls per such frame; small
  // frames never change it.
  if (closed_ || loop_ == nullptr) return;
  const size_t missing = reader_.missing_frame_bytes();
  SetRecvLowWatermark(missing >= kMinLowWatermarkBytes
                          ? static_cast<int>(std::min<size_t>(missing, kMaxLowWatermarkBytes))
                          : 1);
}

void TcpTransport::SetRecvLowWatermark(int bytes) {
  if (bytes != recv_low_watermark_ && socket_.SetRecvLowWatermark(bytes).ok()) {
    recv_low_watermark_ = bytes;
  }
}

void TcpTransport::DeliverBuffered() {
  // A frame may park reads (a caller reads the next one): stop there.
  DeliverFrames(&reader_, &preamble_bytes_, host_, [this] { return !closed_ && !parked_; });
}

void ConfigureStreamSocket(Socket* socket, const StreamTransportOptions& options) {
  // Best effort: a socket that refuses an option (not TCP, an old kernel) still carries calls.
  const int idle_s = static_cast<int>(options.keepalive_idle.ToSeconds());
  if (options.keepalive_idle > MonoDelta()) {
    Status s = socket->SetKeepAlive(std::max(1, idle_s),
                                    static_cast<int>(options.keepalive_interval.ToSeconds()),
                                    options.keepalive_count);
    if (!s.ok()) VLOG(1) << s.ToString();
  }
  if (options.user_timeout > MonoDelta()) {
    Status s = socket->SetUserTimeout(static_cast<int>(options.user_timeout.ToMilliseconds()));
    if (!s.ok()) VLOG(1) << s.ToString();
  }
}

std::unique_ptr<Transport> TcpTransportFactory::NewServerTransport(Socket accepted) {
  ConfigureStreamSocket(&accepted, options_);
  return std::make_unique<TcpTransport>(std::move(accepted), /*connecting=*/false, options_);
}

Result<std::unique_ptr<Transport>> TcpTransportFactory::NewClientTransport(const Sockaddr& remote) {
  RRPC_ASSIGN_OR_RETURN(Socket sock, Socket::CreateTcp(remote.family()));
  ConfigureStreamSocket(&sock, options_);
  RRPC_RETURN_NOT_OK(sock.ConnectNonBlocking(remote));
  return std::unique_ptr<Transport>(
      std::make_unique<TcpTransport>(std::move(sock), /*connecting=*/true, options_));
}

Sockaddr TcpTransport::LocalAddress() const {
  Result<Sockaddr> a = socket_.GetSocketAddress();
  return a.ok() ? *a : Sockaddr();
}

}  // namespace rrpc::rpc
