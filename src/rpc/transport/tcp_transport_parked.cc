// TcpTransport's parked reads: the reactor stops reading a client connection's socket and a
// synchronous caller, chosen by the connection (core/caller_reads.h), reads its own
// response from it with a blocking recv(), into the same FrameReader, as raw TCP's client does.
// Who may read when is the connection's business; here only the how.
//
// Blocking reads on a socket the reactor shares: the first caller to read switches the socket to
// blocking mode (O_NONBLOCK cleared, once per connection), and every other operation on it passes
// MSG_DONTWAIT (Socket's NoWait calls: the reactor's reads, every writer's sendmsg), so only the
// caller that owns the reads ever waits in the kernel. The caller's wait is bounded by
// SO_RCVTIMEO, kept from call to call (a setsockopt only when a deadline comes nearer than the
// value set, or the value is far shorter than the wait wanted), and never longer than
// kMaxCallerWait, so a call without a deadline still wakes now and then to see whether the
// reactor wants the reads (Connection::ReadResponseAsCaller); the last kPreciseWait before a
// deadline is waited in ppoll(), since SO_RCVTIMEO ends a clock tick or more late. What ends the
// wait early: bytes, the peer's close, and CloseUnderCaller's shutdown(), which ends a blocked
// recv() as the stream's end.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "rpc/transport/tcp_transport.h"

namespace rrpc::rpc {

namespace {
// Reads (each up to 16 recv()s, HandleReadable) while resuming, before yielding to the loop.
constexpr int kMaxResumeReads = 4;
// The longest one blocking recv() of a caller waits (SO_RCVTIMEO) before it returns to look at
// the call's deadline and at the reactor.
constexpr MonoDelta kMaxCallerWait = MonoDelta::FromSeconds(1);
// The stretch before a deadline that a caller waits in ppoll() (to the microsecond) instead of a
// blocking recv() (to the clock tick): a call due sooner costs a system call more.
constexpr MonoDelta kPreciseWait = MonoDelta::FromMilliseconds(20);
}  // namespace

bool TcpTransport::ParkReads() {
  // Only client connections park, and they never pause for backpressure: parking uses the
  // pause's stop, so a read loop running now (HandleReadable) ends after this frame's batch.
  if (closed_ || connecting_ || loop_ == nullptr || reads_paused_) return false;
  parked_ = true;
  reads_paused_ = true;
  SetReadWatcher(false);
  // The caller's blocking recv() waits for the watermark: back to any byte while it reads.
  SetRecvLowWatermark(1);
  return true;
}

void TcpTransport::ResumeReads(bool read_now) {
  if (closed_ || !parked_) return;
  parked_ = false;
  reads_paused_ = false;
  WaitForRestOfFrame();  // the caller's reads changed what the pending frame misses
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

Status TcpTransport::BoundBlockingRecv(MonoDelta left) {
  // The timer behind SO_RCVTIMEO counts clock ticks and fires late, never early: up to two
  // ticks (8 ms at 250 Hz, measured) plus an eighth of a long wait (the kernel's timer wheel).
  // Aimed at 7/8 of the time left before the precise stretch, it ends before the deadline.
  MonoDelta target = kMaxCallerWait;
  if (left < MonoDelta::Max()) {
    target =
        std::min(target, MonoDelta::FromNanoseconds((left - kPreciseWait).ToNanoseconds() / 8 * 7));
  }
  // The value set is kept while it ends the wait no later than the target and not much sooner
  // (a wait that ends early only loops); a new one is half the target, so the next call's
  // target (about the same, a little less) still takes it: no setsockopt per call in a steady
  // stream of calls.
  const int64_t set_ns = recv_timeout_.ToNanoseconds();
  if (set_ns == 0 || recv_timeout_ > target || set_ns * 4 < target.ToNanoseconds()) {
    const MonoDelta value = MonoDelta::FromNanoseconds(target.ToNanoseconds() / 2);
    RRPC_RETURN_NOT_OK(socket_.SetRecvTimeout(value));
    recv_timeout_ = value;
  }
  return Status::OK();
}

Result<size_t> TcpTransport::RecvAsCaller(uint8_t* buf, size_t len, MonoDelta left) {
  if (left >= kPreciseWait) {
    // A blocking recv(): it returns with bytes, the stream's end (a close, or CloseUnderCaller's
    // shutdown), an error, or nothing once SO_RCVTIMEO ran out (EINTR is retried inside).
    RRPC_RETURN_NOT_OK(BoundBlockingRecv(left));
    return socket_.Recv(buf, len);
  }
  // The last stretch before the deadline: ppoll() ends on time, to the microsecond.
  const int64_t ns = left.ToNanoseconds();
  timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  pollfd p{socket_.fd(), POLLIN | POLLRDHUP, 0};
  const int r = ::ppoll(&p, 1, &timeout, nullptr);
  if (r < 0 && errno != EINTR) return Status::FromErrno("poll", errno);
  if (r <= 0) return size_t{0};
  return socket_.RecvNoWait(buf, len);
}

Result<bool> TcpTransport::ReadFrameWhileParked(MonoTime deadline, BlockSlice* frame,
                                                size_t* bytes_read) {
  *bytes_read = 0;
  if (!blocking_reads_) {
    // Once per connection. The reactor's and the writers' calls never wait from here on
    // (MSG_DONTWAIT), so the mode matters only to the owner of the reads.
    RRPC_RETURN_NOT_OK(socket_.SetNonBlocking(false));
    blocking_reads_ = true;
  }
  while (true) {
    RRPC_ASSIGN_OR_RETURN(bool complete, reader_.NextFrame(frame));
    if (complete) return true;
    // Wait first: the caller comes here right after writing its call, before any answer.
    const MonoDelta left = deadline.IsMax() ? MonoDelta::Max() : deadline - MonoTime::Now();
    if (left <= MonoDelta()) return false;
    // As HandleReadable: writable_data() first, it makes the room.
    uint8_t* const buf = reader_.writable_data();
    Result<size_t> got = RecvAsCaller(buf, reader_.writable_size(), left);
    if (!got.ok()) {
      return got.status().IsEndOfFile() ? Status::NetworkError("connection closed by peer")
                                        : got.status();
    }
    if (*got == 0) return false;  // one bounded wait is over: the caller looks around
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
