// Connection: one TCP connection, client or server side, owned by one reactor. The reactor's
// thread does all its reading and owns its state, with one exception: the write side (write
// queue, unsent byte count, writing to the socket) is guarded by write_mu_, because a worker may
// write a lone response itself (TryWriteLoneResponse). It negotiates (preamble and feature
// exchange, as a non-blocking state machine with a timeout), then:
//  - server side: cuts frames into InboundCalls and hands them to the service pool; writes the
//    responses the reactor hands back;
//  - client side: writes OutboundCalls and matches responses to them by call id.
// Writes go out at once with writev; the write watcher is armed only after a partial write.
// Reference counted because in-flight InboundCalls point back to it from worker threads; the
// reactor drops its socket and watchers in Shutdown(), so a late reference is harmless.
#pragma once

#include <ev.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rpc/core/outbound_call.h"
#include "rpc/transport/frame_reader.h"
#include "rpc/transport/transport.h"
#include "util/monotime.h"
#include "util/ref_counted.h"
#include "util/sockaddr.h"
#include "util/status.h"

namespace rrpc::rpc {

class InboundCall;
class Reactor;
struct MessengerOptions;

class Connection : public RefCounted<Connection> {
 public:
  enum class Direction { kClient, kServer };
  enum class State { kConnecting, kNegotiating, kOpen, kClosed };

  // Reactor thread. `socket` is connected (server) or connecting (client).
  Connection(Reactor* reactor, Direction direction, Socket socket, const Sockaddr& remote);
  ~Connection();

  // Reactor thread: registers the watchers and starts negotiating.
  void Start();
  // Reactor thread: client side; queues the call (it is sent once negotiation is done).
  void QueueOutboundCall(scoped_refptr<OutboundCall> call);
  // Reactor thread: server side; queues a response transfer (the connection now owns `call`).
  void QueueResponse(InboundCall* call);
  // Reactor thread: writes what is queued, as far as the socket takes it.
  void Flush();
  // A worker thread, server side, after `call` has its response: when the call is the only one
  // this connection has in flight and nothing waits to be written, there is no batch for the
  // reactor to join it to, so the worker writes it now and saves the hand-off to the reactor
  // (and that thread's wakeup). Returns false, having done nothing, otherwise: the caller then
  // hands the call to the reactor. On true the connection owns the call (it is written, or
  // queued for the reactor to finish).
  bool TryWriteLoneResponse(InboundCall* call);
  // Reactor thread: closes the socket, fails every call waiting on it with `reason`, stops the
  // watchers. Idempotent.
  void Shutdown(const Status& reason);

  Direction direction() const { return direction_; }
  State state() const { return state_; }
  bool is_open() const { return state_ == State::kOpen; }
  const Sockaddr& remote() const { return remote_; }
  Reactor* reactor() const { return reactor_; }
  const char* transport_name() const { return transport_->name(); }
  MonoTime last_activity() const { return last_activity_; }
  MonoTime created() const { return created_; }
  // Calls this connection waits on (client) or has in flight in the server (server).
  size_t calls_in_flight() const;
  // True when nothing is in flight or queued: the connection may be closed as idle.
  bool IsIdle();
  // True when bytes wait to be written and none has gone out since `since`: the peer stopped
  // reading (a server's responses pile up, paused reads keep its memory bounded, but the
  // connection would stay forever).
  bool IsWriteStalledSince(MonoTime since);
  uint64_t bytes_received() const { return bytes_received_; }
  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  bool reads_paused() const { return reads_paused_; }

  // Server side, any thread: an InboundCall of this connection finished (response queued or
  // dropped). Used for calls_in_flight().
  void InboundCallDone() { inbound_in_flight_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  static void OnReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnWritable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnNegotiationTimeout(struct ev_loop* loop, ev_timer* w, int revents);
  static void OnCallTimeout(OutboundCall* call, void* arg);

  void HandleReadable();
  void HandleWritable();
  // Reads what the socket has; returns false if the connection was shut down.
  bool ReadIncoming();
  Status ReadPreamble();
  Status HandleFrame(BlockSlice frame);
  Status HandleNegotiationFrame(BlockSlice frame);
  Status HandleCallFrame(BlockSlice frame);
  Status HandleResponseFrame(BlockSlice frame);
  void SendNegotiationRequest();
  // Client side: queues the calls that waited for the connection, and sends later ones at once.
  void SendPendingCalls();
  void SendNegotiationResponse(const Status& error);
  void MarkOpen();
  void QueueTransfer(OutboundTransfer* transfer);
  // Server side: stops or restarts reading from the socket by how many response bytes wait.
  void ApplyBackpressure();
  void ArmWriteWatcher(bool on);

  Reactor* const reactor_;
  const Direction direction_;
  const Sockaddr remote_;
  const MessengerOptions& options_;
  std::unique_ptr<Transport> transport_;
  State state_;
  FrameReader reader_;

  ev_io read_watcher_;
  ev_io write_watcher_;
  ev_timer negotiation_timer_;
  bool write_armed_ = false;
  bool reads_paused_ = false;

  // Server side: preamble bytes received so far.
  uint8_t preamble_[6];
  size_t preamble_received_ = 0;

  // The write side. Held while writing to the socket, so one thread writes at a time; never held
  // while a transfer's TransferDone/TransferAborted runs (those may queue more work).
  std::mutex write_mu_;
  // Transfers to write, in order. The connection owns the references they represent.
  // GUARDED_BY(write_mu_).
  TransferQueue write_queue_;
  // Bytes of the write queue not yet written; reads pause while it is too high (server side).
  // Changed under write_mu_; read without it for backpressure.
  std::atomic<size_t> unsent_bytes_{0};
  // Set by Shutdown: no thread writes to the socket any more. GUARDED_BY(write_mu_).
  bool write_closed_ = false;
  // Client side: calls made before the connection could take them (while connecting), sent right
  // after the negotiation request.
  std::vector<scoped_refptr<OutboundCall>> pending_calls_;
  // Client side: calls go out as they come (set once the negotiation request is queued).
  bool sending_calls_ = false;
  // Client side: calls sent (or being sent) and awaiting their response, by call id.
  std::unordered_map<int32_t, scoped_refptr<OutboundCall>> awaiting_response_;
  // Server side: calls handed to the service pool and not yet answered.
  std::atomic<int64_t> inbound_in_flight_{0};

  MonoTime created_;
  MonoTime last_activity_;
  // When the write queue last went from empty to non-empty or the socket last took bytes after
  // being full. GUARDED_BY(write_mu_).
  MonoTime last_write_progress_;
  uint64_t bytes_received_ = 0;
  std::atomic<uint64_t> bytes_sent_{0};  // changed under write_mu_
};

}  // namespace rrpc::rpc
