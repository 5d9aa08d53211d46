// Connection: one connection, client or server side, owned by one reactor, over one Transport
// (transport/transport.h) that it sees only through that interface. The reactor's thread owns its
// state, with one exception: the write side (write queue, unsent byte count, the transport's
// Write()) is guarded by write_mu_, because a worker may write a lone response itself
// (TryWriteLoneResponse) where the transport allows it. It negotiates (preamble and feature
// exchange, a non-blocking state machine bounded by a timeout), then:
//  - server side: turns frames into InboundCalls and hands them to the service pool; writes the
//    responses the reactor hands back;
//  - client side: writes OutboundCalls and matches responses to them by call id.
// Writes go out at once; the transport is asked to report writability only after a short write.
// Reference counted because in-flight InboundCalls point back to it from worker threads; the
// reactor closes its transport in Shutdown(), so a late reference is harmless.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rpc/core/negotiation.h"
#include "rpc/core/outbound_call.h"
#include "rpc/transport/transport.h"
#include "util/monotime.h"
#include "util/ref_counted.h"
#include "util/sockaddr.h"
#include "util/stash_allocator.h"
#include "util/status.h"

namespace rrpc::rpc {

class InboundCall;
class Reactor;
struct MessengerOptions;

class Connection final : public RefCounted<Connection>,
                         private TransportHost,
                         private NegotiationHost {
 public:
  enum class Direction { kClient, kServer };
  enum class State { kConnecting, kNegotiating, kOpen, kClosed };

  // Reactor thread. `transport` is connected (server) or connecting (client).
  Connection(Reactor* reactor, Direction direction, std::unique_ptr<Transport> transport,
             const Sockaddr& remote);
  ~Connection();

  // Reactor thread: starts the transport and the negotiation (and its timeout).
  void Start();
  // Reactor thread: client side; queues the call (it is sent once negotiation allows).
  void QueueOutboundCall(scoped_refptr<OutboundCall> call);
  // Reactor thread: server side; queues a response transfer (the connection now owns `call`).
  void QueueResponse(InboundCall* call);
  // Reactor thread: writes what is queued, as far as the transport takes it.
  void Flush();
  // A worker thread, server side, after `call` has its response: when the call is the only one
  // this connection has in flight, nothing waits to be written and the transport allows writes
  // from other threads, there is no batch for the reactor to join it to, so the worker writes it
  // now and saves the hand-off to the reactor (and that thread's wakeup). Returns false, having
  // done nothing, otherwise: the caller then hands the call to the reactor. On true the
  // connection owns the call (it is written, or queued for the reactor to finish).
  bool TryWriteLoneResponse(InboundCall* call);
  // A thread making a synchronous call, client side: the same for a request. When nothing waits
  // to be written, no other caller's call is out this way and the transport allows writes from
  // other threads (concurrent_write), the caller writes `call` itself and saves the hand-off to
  // the reactor (a wakeup, and the reactor's loop turn before the write); the response comes back
  // through the reactor as usual. Returns false, having done nothing, otherwise. On true the call
  // has no timer on the reactor: past its deadline the caller must call TimeOutCallerCall().
  bool TrySendCallFromCaller(const scoped_refptr<OutboundCall>& call);
  // Any thread: finishes `call` (sent by TrySendCallFromCaller) as timed out, on the reactor,
  // unless it has finished by then.
  void TimeOutCallerCall(scoped_refptr<OutboundCall> call);
  // Reactor thread: hands the byte stream under the current transport (Transport::Detach) to
  // `make`, and continues the connection over the transport it returns: negotiation upgrading the
  // connection (TLS after the first bytes, RDMA after the TCP bootstrap). Safe from inside the
  // current transport's callbacks (it is kept until the connection goes). On error the
  // connection is shut down with it.
  using TransportMaker = std::function<Result<std::unique_ptr<Transport>>(DetachedStream)>;
  Status UpgradeTransport(const TransportMaker& make);
  // Reactor thread: closes the transport, fails every call waiting on it with `reason`.
  // Idempotent.
  void Shutdown(const Status& reason);

  Direction direction() const { return direction_; }
  State state() const { return state_; }
  bool is_open() const { return state_ == State::kOpen; }
  const Sockaddr& remote() const override { return remote_; }
  Reactor* reactor() const { return reactor_; }
  // Reactor thread.
  const char* transport_name() const { return transport_->name(); }
  void DescribeTransport(std::vector<std::pair<std::string, std::string>>* out) const {
    transport_->Describe(out);
  }
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

  // Server side, any thread: an InboundCall of this connection finished (response written or
  // dropped).
  void InboundCallDone();

 private:
  // TransportHost: reactor thread.
  void OnTransportConnected() override;
  void OnBytesReceived(size_t bytes, MonoTime now) override;
  void OnPreamble(Slice preamble) override;
  void OnFrame(BlockSlice frame) override;
  void OnWritable() override;
  void OnTransportFailed(const Status& reason) override;
  void OnProtocolError(const Status& reason) override;

  NegotiationHost* AsNegotiationHost() { return this; }
  // NegotiationHost: reactor thread.
  void SendConnectionBytes(BlockSlice bytes) override;
  TransportCapabilities transport_capabilities() const override { return caps_; }

  static void OnNegotiationTimeout(struct ev_loop* loop, ev_timer* w, int revents);
  static void OnCallTimeout(OutboundCall* call, void* arg);

  void HandleNegotiationFrame(Slice frame);
  // Logs why, sends what the negotiation queued (a server's refusal) and closes.
  void FailNegotiation(const Status& reason);
  Status HandleCallFrame(BlockSlice frame);
  Status HandleResponseFrame(BlockSlice frame);
  // Client side: queues the calls that waited for the connection, and sends later ones at once.
  void SendPendingCalls();
  void MarkOpen();
  void QueueTransfer(OutboundTransfer* transfer);
  // Server side: stops or restarts reading by how many response bytes wait.
  void ApplyBackpressure();
  void NotifyWhenWritable(bool on);

  Reactor* const reactor_;
  const Direction direction_;
  const Sockaddr remote_;
  const MessengerOptions& options_;
  // Replaced only on the reactor thread, under write_mu_ (a worker's lone write uses it).
  std::unique_ptr<Transport> transport_;
  TransportCapabilities caps_;                                  // transport_'s; changed with it
  std::vector<std::unique_ptr<Transport>> retired_transports_;  // reactor thread
  State state_;
  // While negotiating (one of them, by direction); dropped once open.
  std::unique_ptr<ServerNegotiation> server_negotiation_;
  std::unique_ptr<ClientNegotiation> client_negotiation_;

  ev_timer negotiation_timer_;
  bool write_armed_ = false;
  bool reads_paused_ = false;

  // The write side. Held while writing to the transport, so one thread writes at a time; never
  // held while a transfer's TransferDone/TransferAborted runs (those may queue more work).
  std::mutex write_mu_;
  // Transfers to write, in order. The connection owns the references they represent.
  // GUARDED_BY(write_mu_).
  TransferQueue write_queue_;
  // Bytes of the write queue not yet written; reads pause while it is too high (server side).
  // Changed under write_mu_; read without it for backpressure.
  std::atomic<size_t> unsent_bytes_{0};
  // Set by Shutdown: no thread writes to the transport any more. GUARDED_BY(write_mu_).
  bool write_closed_ = false;
  // Client side: the call a synchronous caller wrote itself (TrySendCallFromCaller), awaiting
  // its response. GUARDED_BY(write_mu_).
  scoped_refptr<OutboundCall> caller_call_;
  // Client side: calls may be written now (the preamble and the negotiation request are queued
  // ahead of them); set with sending_calls_. GUARDED_BY(write_mu_).
  bool callers_may_write_ = false;
  // Client side: calls made before the connection could take them (while connecting), sent right
  // after the negotiation request.
  std::vector<scoped_refptr<OutboundCall>> pending_calls_;
  // Client side: calls go out as they come (set once the negotiation allows it).
  bool sending_calls_ = false;
  // Client side: calls sent (or being sent) and awaiting their response, by call id. Its nodes
  // come from the reactor thread's stash: no malloc per call.
  using AwaitingMap =
      std::unordered_map<int32_t, scoped_refptr<OutboundCall>, std::hash<int32_t>,
                         std::equal_to<int32_t>,
                         StashAllocator<std::pair<const int32_t, scoped_refptr<OutboundCall>>>>;
  AwaitingMap awaiting_response_;
  // Server side: calls handed to the service pool and not yet answered.
  std::atomic<int64_t> inbound_in_flight_{0};

  MonoTime created_;
  MonoTime last_activity_;
  // When the write queue last went from empty to non-empty or the transport last took bytes after
  // being full. GUARDED_BY(write_mu_).
  MonoTime last_write_progress_;
  uint64_t bytes_received_ = 0;
  std::atomic<uint64_t> bytes_sent_{0};  // changed under write_mu_
};

}  // namespace rrpc::rpc
