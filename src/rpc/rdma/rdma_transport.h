// RdmaTransport: a connection's frames over an RC queue pair (private receive queue). Frames are
// cut into messages of at most one receive buffer: Write() copies the queue's bytes into
// registered send blocks and posts them (inline when they fit the granted cap), one credit each
// (credit_window.h); received messages are copied out of their receive block into a FrameReader,
// which gives whole frames to the connection exactly as over TCP, and the block is reposted at
// once (one more grant owed). Completions arrive through the CQ's channel fd, watched by the
// reactor (or, in busy-poll mode, by polling every loop iteration). The TCP socket of the
// bootstrap stays open and watched: its close is the peer's death, any byte on it an error.
//
// Each message starts with an 8-byte header: kind (1 data, 2 grant only), 3 zero bytes, and the
// credits it grants (big-endian 32 bits); docs/wire-format.md.
// Reactor thread only (capabilities().concurrent_write is false).
#pragma once

#include <ev.h>

#include <deque>
#include <memory>
#include <utility>

#include "rpc/rdma/credit_window.h"
#include "rpc/rdma/rdma_endpoint.h"
#include "rpc/transport/frame_reader.h"
#include "rpc/transport/transport.h"
#include "util/socket.h"

namespace rrpc {
class HistogramMetric;
}

namespace rrpc::rdma {

inline constexpr size_t kMessageHeaderSize = 8;

// Counters an RDMA connection reports into (the factory's metrics); may be shared by many.
struct RdmaSendMetrics {
  HistogramMetric* inline_send_bytes = nullptr;  // sizes of messages sent inline
  HistogramMetric* posted_send_bytes = nullptr;  // sizes of messages sent from registered memory
};

struct RdmaTransportOptions {
  size_t max_frame_size = 64 * 1024 * 1024;
  bool use_inline = true;  // post messages up to the inline cap with IBV_SEND_INLINE
  bool busy_poll = false;  // poll the CQ every loop iteration instead of sleeping on the channel
  const char* backend = "soft";  // for /connections
};

class RdmaTransport final : public rpc::Transport {
 public:
  // `endpoint` is connected to the peer, which posted `peer_credits` receive buffers of
  // `peer_buffer_size` bytes; `keep_alive` is held until the transport is gone (the device, and
  // the registry `metrics` live in when the factory owns it).
  RdmaTransport(std::unique_ptr<RdmaEndpoint> endpoint, Socket bootstrap_socket,
                uint32_t peer_credits, uint32_t peer_buffer_size,
                const RdmaTransportOptions& options, RdmaSendMetrics metrics,
                std::shared_ptr<void> keep_alive);
  ~RdmaTransport() override;

  const char* name() const override { return "rdma"; }
  rpc::TransportCapabilities capabilities() const override { return {}; }
  void Start(struct ev_loop* loop, rpc::TransportHost* host) override;
  Status ExpectPreamble(size_t bytes) override;
  Result<size_t> Write(const rpc::TransferQueue& queue) override;
  void NotifyWhenWritable(bool on) override { wants_writable_ = on; }
  void PauseReading(bool paused) override;
  Result<rpc::DetachedStream> Detach() override;
  void Close() override;
  void Describe(std::vector<std::pair<std::string, std::string>>* out) const override;

 private:
  static void OnChannelReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnSocketReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnIdle(struct ev_loop* loop, ev_idle* w, int revents);
  void HandleCompletions();
  void HandleReceive(uint32_t index, uint32_t length);
  void HandleSocket();
  // Copies a data message's payload into the reader and hands up every whole frame.
  void Deliver(uint32_t index, uint32_t length);
  Status Repost(uint32_t index);
  // Posts send block `index` holding `length` bytes (header included).
  Status PostSend(uint32_t index, uint32_t length);
  void SendGrantIfDue();
  void Fail(const Status& status);

  std::unique_ptr<RdmaEndpoint> ep_;  // nullptr once closed
  Socket socket_;
  const RdmaTransportOptions options_;
  const RdmaSendMetrics metrics_;
  std::shared_ptr<void> keep_alive_;
  const uint32_t max_payload_;  // per message: the smaller of our send and the peer's receive
  CreditWindow window_;
  rpc::FrameReader reader_;
  struct ev_loop* loop_ = nullptr;
  rpc::TransportHost* host_ = nullptr;
  ev_io channel_watcher_;
  ev_io socket_watcher_;
  ev_idle idle_watcher_;
  bool started_ = false;
  bool closed_ = false;
  bool wants_writable_ = false;
  bool reads_paused_ = false;
  // Received while reads were paused: (block index, length), delivered and reposted on resume.
  std::deque<std::pair<uint32_t, uint32_t>> held_;
  uint64_t inline_sends_ = 0;
  uint64_t posted_sends_ = 0;
  uint64_t grant_messages_ = 0;
};

}  // namespace rrpc::rdma
