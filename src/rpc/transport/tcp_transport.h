// TcpTransport: a connection's frames over a TCP socket that the reactor never waits on (a
// non-blocking one; once a synchronous caller has read from it, a blocking one on which every
// reactor and writer call passes MSG_DONTWAIT: tcp_transport_parked.cc). Reads go into a
// FrameReader (up to 16 reads per readable event, so one busy peer cannot starve the reactor's
// others; a readv() where the reader offers the next length prefix's room too) and come out as
// frames; writes gather the queue into one writev() of up to 64 iovecs, and only a partial write
// arms the write watcher (no epoll_ctl per call). Owns the socket, its watchers, connect errors and
// TCP_NODELAY. A worker may write concurrently with the reactor's reads: the kernel keeps the two
// directions of a socket apart.
// Reactor thread, except Write() (see Transport).
#pragma once

#include <ev.h>

#include <memory>

#include "rpc/transport/frame_reader.h"
#include "rpc/transport/transport.h"
#include "rrpc/util/sockaddr.h"
#include "util/socket.h"

namespace rrpc::rpc {

struct StreamTransportOptions {
  // Largest frame accepted, checked from the length prefix before buffering.
  size_t max_frame_size = 64 * 1024 * 1024;
  // Bytes read per recv() when no large frame is pending.
  size_t read_block_size = 64 * 1024;
  // Dead-peer detection on the socket (MessengerOptions says what each means); zero: off.
  MonoDelta keepalive_idle;
  MonoDelta keepalive_interval;
  int keepalive_count = 0;
  MonoDelta user_timeout;
};

// Sets up a stream socket as every connection's: no Nagle delay, keepalive and
// TCP_USER_TIMEOUT from `options`. Best effort (a socket that refuses an option keeps working).
void ConfigureStreamSocket(Socket* socket, const StreamTransportOptions& options);

class TcpTransport final : public Transport {
 public:
  // `socket` is connected (server side) or connecting (client side: `connecting`).
  TcpTransport(Socket socket, bool connecting, const StreamTransportOptions& options);
  // Continues a connected stream another transport read from: its unread bytes come first.
  TcpTransport(DetachedStream stream, const StreamTransportOptions& options);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  Sockaddr LocalAddress() const override;
  TransportCapabilities capabilities() const override;
  void Start(struct ev_loop* loop, TransportHost* host) override;
  Status ExpectPreamble(size_t bytes) override;
  Result<size_t> Write(const TransferQueue& queue, size_t max_bytes) override;
  void NotifyWhenWritable(bool on) override;
  void PauseReading(bool paused) override;
  Result<DetachedStream> Detach() override;
  void Close() override;
  size_t buffered_bytes() const override { return reader_.buffered(); }
  // Reads by a synchronous caller (tcp_transport_parked.cc).
  bool ParkReads() override;
  void ResumeReads(bool read_now) override;
  bool PeerQuietWhileParked() override;
  Result<bool> ReadFrameWhileParked(MonoTime deadline, BlockSlice* frame,
                                    size_t* bytes_read) override;
  void CloseUnderCaller() override;

 private:
  static void OnReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnWritable(struct ev_loop* loop, ev_io* w, int revents);
  void HandleReadable();
  void HandleWritable();
  void FinishConnect();
  // Hands the host what the reader has: the preamble, then whole frames.
  void DeliverBuffered();
  // Before the loop waits for more bytes: asks the kernel to signal readability only once the
  // rest of a large partial frame has arrived (SO_RCVLOWAT), or any byte otherwise.
  void WaitForRestOfFrame() {
    // Inline for the common case: no large partial frame, and the watermark at its default.
    if (recv_low_watermark_ == 1 && reader_.missing_frame_bytes() < kMinLowWatermarkBytes) return;
    SetLowWatermarkForFrame();
  }
  void SetLowWatermarkForFrame();
  void SetRecvLowWatermark(int bytes);
  // WaitForRestOfFrame: partial frames missing at least this much wait for the rest with a low
  // watermark (below, a wake-up too many costs less than the two setsockopt() calls).
  static constexpr size_t kMinLowWatermarkBytes = 16 * 1024;
  void StopWatchers();
  void SetReadWatcher(bool on);
  void SetWriteWatcher(bool on);
  // Caller thread owning the reads (tcp_transport_parked.cc): one wait for bytes, `left` before
  // the deadline (Max: none); 0 when the wait ended without any.
  Result<size_t> RecvAsCaller(uint8_t* buf, size_t len, MonoDelta left);
  // Sets SO_RCVTIMEO, when the value set does not fit, for a blocking recv() `left` before the
  // deadline.
  Status BoundBlockingRecv(MonoDelta left);

  Socket socket_;
  FrameReader reader_;
  struct ev_loop* loop_ = nullptr;
  TransportHost* host_ = nullptr;
  ev_io read_watcher_;
  ev_io write_watcher_;
  bool connecting_;
  bool closed_ = false;
  bool read_active_ = false;
  bool write_active_ = false;
  bool reads_paused_ = false;
  bool wants_writable_ = false;
  bool seeded_ = false;  // bytes from a detached stream wait in reader_ for the first read event
  // ParkReads() ran (reads_paused_ is set with it): the reactor does not read; a caller thread
  // the connection chose may, and owns reader_ and the socket's read side meanwhile. Reactor
  // thread.
  bool parked_ = false;
  size_t preamble_bytes_ = 0;   // still to deliver through OnPreamble
  int recv_low_watermark_ = 1;  // the socket's SO_RCVLOWAT (WaitForRestOfFrame)
  // A caller's blocking reads (tcp_transport_parked.cc): the socket was switched to blocking
  // mode (every other I/O on it passes MSG_DONTWAIT), and the SO_RCVTIMEO last set on it. Owned
  // by the thread holding the read side: a caller, or the reactor in Detach(); the connection's
  // hand-overs of the reads order their accesses.
  bool blocking_reads_ = false;
  MonoDelta recv_timeout_;
};

// Makes TcpTransports; the messenger's default factory.
class TcpTransportFactory final : public TransportFactory {
 public:
  explicit TcpTransportFactory(StreamTransportOptions options) : options_(options) {}
  std::unique_ptr<Transport> NewServerTransport(Socket accepted) override;
  Result<std::unique_ptr<Transport>> NewClientTransport(const Sockaddr& remote) override;

 private:
  const StreamTransportOptions options_;
};

}  // namespace rrpc::rpc
