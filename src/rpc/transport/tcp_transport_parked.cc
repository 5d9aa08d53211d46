// TcpTransport's parked reads: the reactor stops reading a client connection's socket and a
// synchronous caller, chosen by the connection (core/connection_caller_read.cc), reads its own
// response from it with poll() and recv(), into the same FrameReader, as raw TCP's client does
// from its own recv(). Who may read when is the connection's business; here only the how.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "rpc/transport/tcp_transport.h"

namespace rrpc::rpc {

namespace {
// Reads (each up to 16 recv()s, HandleReadable) while resuming, before yielding to the loop.
constexpr int kMaxResumeReads = 4;
}  // namespace

bool TcpTransport::ParkReads() {
  // Only client connections park, and they never pause for backpressure: parking uses the
  // pause's stop, so a read loop running now (HandleReadable) ends after this frame's batch.
  if (closed_ || connecting_ || loop_ == nullptr || reads_paused_) return false;
  parked_ = true;
  reads_paused_ = true;
  SetReadWatcher(false);
  return true;
}

void TcpTransport::ResumeReads(bool read_now) {
  if (closed_ || !parked_) return;
  parked_ = false;
  reads_paused_ = false;
  SetReadWatcher(true);
  if (read_now) {
    DeliverBuffered();
    // Until the socket holds nothing more: a close right behind the last bytes (a server's
    // error frame, then its close) is met now, before the caller queues its next call, not in a
    // later loop iteration. Bounded, as a readable event is.
    for (int i = 0; i < kMaxResumeReads && !closed_ && !parked_ && !PeerQuietWhileParked(); i++) {
      HandleReadable();
    }
  } else if (reader_.buffered() > 0) {
    // The socket may never signal these bytes again: the read event delivers them first.
    seeded_ = true;
    ev_feed_event(loop_, &read_watcher_, EV_READ);
  }
}

bool TcpTransport::PeerQuietWhileParked() {
  // Also asked by ResumeReads() (reactor thread): a look at the socket, nothing read.
  pollfd p{socket_.fd(), POLLIN | POLLRDHUP, 0};
  int r;
  do {
    r = ::poll(&p, 1, 0);
  } while (r < 0 && errno == EINTR);
  return r == 0;
}

Result<bool> TcpTransport::ReadFrameWhileParked(MonoTime deadline, BlockSlice* frame,
                                                size_t* bytes_read) {
  *bytes_read = 0;
  while (true) {
    RRPC_ASSIGN_OR_RETURN(bool complete, reader_.NextFrame(frame));
    if (complete) return true;
    // Wait first: the caller comes here right after writing its call, before any answer.
    timespec left{};
    timespec* timeout = nullptr;
    if (!deadline.IsMax()) {
      const int64_t ns = (deadline - MonoTime::Now()).ToNanoseconds();
      if (ns <= 0) return false;
      left.tv_sec = static_cast<time_t>(ns / 1000000000);
      left.tv_nsec = static_cast<long>(ns % 1000000000);
      timeout = &left;
    }
    pollfd p{socket_.fd(), POLLIN | POLLRDHUP, 0};
    const int r = ::ppoll(&p, 1, timeout, nullptr);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("poll", errno);
    }
    if (r == 0) continue;  // the deadline check above ends it
    // As HandleReadable: writable_data() first, it makes the room.
    uint8_t* const buf = reader_.writable_data();
    Result<size_t> got = socket_.Recv(buf, reader_.writable_size());
    if (!got.ok()) {
      return got.status().IsEndOfFile() ? Status::NetworkError("connection closed by peer")
                                        : got.status();
    }
    reader_.Commit(*got);
    *bytes_read += *got;
  }
}

void TcpTransport::CloseUnderCaller() {
  if (closed_) return;
  closed_ = true;
  StopWatchers();
  // Wakes a caller in poll() (POLLHUP) and ends its stream; the descriptor closes with socket_
  // when the transport is destroyed (by then no caller holds the connection).
  ::shutdown(socket_.fd(), SHUT_RDWR);
}

}  // namespace rrpc::rpc
