// Connection: one connection, client or server side, owned by one reactor, over one Transport
// (transport/transport.h) that it sees only through that interface. It negotiates (preamble and
// feature exchange, a non-blocking state machine bounded by a timeout; connection_negotiation.cc),
// then:
//  - server side: turns frames into InboundCalls and hands them to the service pool; writes the
//    responses the reactor hands back;
//  - client side: writes OutboundCalls and matches responses to them by call id.
// The reactor's thread owns its state. The jobs with threads or state of their own are parts,
// members with headers of their own, each holding a pointer back to this connection:
//  - ConnectionWriter (connection_writer.h): the write side, the one lock other threads take;
//  - CallerReads (caller_reads.h): client side, a synchronous caller writing its call and reading
//    its response itself;
//  - CallDeadlines (call_deadlines.h): client side, the calls' deadlines on one timer;
//  - InboundCancels (inbound_cancels.h): server side, the calls a cancel frame may reach.
// Reference counted because in-flight InboundCalls point back to it from worker threads; the
// reactor closes its transport in Shutdown(), so a late reference is harmless.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rpc/core/call_deadlines.h"
#include "rpc/core/caller_reads.h"
#include "rpc/core/connection_writer.h"
#include "rpc/core/inbound_cancels.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/stream_table.h"
#include "rpc/transport/transport.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "util/int_map.h"
#include "util/memory_tracker.h"

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
  void QueueOutboundCall(scoped_refptr<OutboundCall>&& call);
  // Reactor thread: server side; queues a response transfer (the connection now owns `call`).
  void QueueResponse(InboundCall* call);
  // Reactor thread: writes what is queued, as far as the transport takes it.
  void Flush() { writer_.Flush(); }
  // A worker thread, server side, after `call` has its response: when the call is the only one
  // this connection has in flight, nothing waits to be written and the transport allows writes
  // from other threads, there is no batch for the reactor to join it to, so the worker writes it
  // now and saves the hand-off to the reactor (and that thread's wakeup). Returns false, having
  // done nothing, otherwise: the caller then hands the call to the reactor. On true the
  // connection owns the call (it is written, or queued for the reactor to finish).
  bool TryWriteLoneResponse(InboundCall* call) {
    // Another call in flight means more responses are coming: let the reactor batch them.
    if (inbound_in_flight_.load(std::memory_order_relaxed) != 1) return false;
    return writer_.TryWriteLoneResponse(call);
  }
  // A thread making a synchronous call, client side: the same for a request (CallerReads::TrySend
  // and CallerSend say what is done). Not before the connection sends calls, nor once it closed.
  using CallerSend = rpc::CallerSend;
  CallerSend TrySendCallFromCaller(const scoped_refptr<OutboundCall>& call) {
    if (direction_ != Direction::kClient) return CallerSend::kNotSent;
    return caller_reads_.TrySend(call);
  }
  // The caller thread, after kSentCallerReads: reads its response itself (CallerReads::
  // ReadResponse).
  void ReadResponseAsCaller(const scoped_refptr<OutboundCall>& call) {
    caller_reads_.ReadResponse(call);
  }
  // Any thread: finishes `call` (sent by TrySendCallFromCaller) as timed out, on the reactor,
  // unless it has finished by then.
  void TimeOutCallerCall(scoped_refptr<OutboundCall> call) {
    caller_reads_.TimeOut(std::move(call));
  }
  // Cancellation (docs/wire-format.md, "Control frames").
  // Client side, reactor thread: `call` (unfinished, waiting on this connection) was cancelled:
  // finishes it Aborted now and, when its frame has started out and the server negotiated
  // CANCELLATION, tells the server with a cancel frame.
  void CancelCall(OutboundCall* call);
  // Server side (InboundCancels::Untrack): any thread, once per tracked call, as it answers.
  void UntrackForCancel(InboundCall* call) { cancels_.Untrack(call); }
  // Server side (InboundCancels::SetCallback): the handler's thread (RpcContext::OnCancel).
  void SetCancelCallback(InboundCall* call, std::function<void()> callback) {
    cancels_.SetCallback(call, std::move(callback));
  }

  // Streams (docs/streams.md; stream_table.h). Reactor thread: a stream's frame to write.
  void QueueStreamFrame(OutboundTransfer* frame);
  // Reactor thread: the connection's open streams.
  StreamTable& streams() { return streams_; }

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
  MonoTime last_activity() const { return std::max(last_activity_, caller_reads_.last_read()); }
  MonoTime created() const { return created_; }
  // Calls this connection waits on (client) or has in flight in the server (server).
  size_t calls_in_flight() const;
  // True when nothing is in flight or queued: the connection may be closed as idle.
  bool IsIdle();
  // True when bytes wait to be written and none has gone out since `since`: the peer stopped
  // reading (a server's responses pile up, paused reads keep its memory bounded, but the
  // connection would stay forever).
  bool IsWriteStalledSince(MonoTime since) { return writer_.IsStalledSince(since); }
  // Who the peer is (server side: the client's user and how it authenticated; client side: the
  // user the server says we are). Fixed when the connection opens; read by workers after that.
  const CallerIdentity& identity() const { return identity_; }
  // Both sides negotiated EXACTLY_ONCE (the server keeps results of tracked calls). Set when the
  // connection opens; any thread.
  bool peer_tracks_results() const { return peer_tracks_results_.load(std::memory_order_acquire); }
  // Both sides negotiated COMPRESSION (the peer reads compressed bodies). Set when the connection
  // opens; any thread.
  bool peer_reads_compression() const {
    return peer_reads_compression_.load(std::memory_order_acquire);
  }
  uint64_t bytes_received() const { return bytes_received_ + caller_reads_.bytes_received(); }
  uint64_t bytes_sent() const { return writer_.bytes_sent(); }
  bool reads_paused() const { return reads_paused_; }

  // Server side, any thread: an InboundCall of this connection finished (response written or
  // dropped).
  void InboundCallDone();
  // Server side: the bytes held for this connection's inbound calls (a child of the messenger's
  // tracker); nullptr on the client side. Any thread may consume or release.
  MemoryTracker* inbound_memory() { return direction_ == Direction::kServer ? &memory_ : nullptr; }
  // Reactor thread, server side: stops reading while too many response bytes wait; a paused
  // connection reads again once few wait and its inbound memory (and its messenger's) is below
  // 3/4 of the limits. Cheap: runs on every response queued.
  void ApplyBackpressure();
  // Reactor thread, server side, for a paused connection (the reactor asks every few ms): over
  // the memory limits, OnInboundMemoryOverLimit(); otherwise ApplyBackpressure().
  void ReconsiderReading();
  // Reactor thread, client side, from the reactor's periodic scan: with calls outstanding and
  // nothing received for options().ping_after, sends one ping (a control frame) per silence, so
  // that a dead server leaves unacknowledged bytes and TCP_USER_TIMEOUT closes the connection.
  // Only to a server that takes control frames (negotiated CANCELLATION).
  void MaybePing(MonoTime now);
  // Reactor thread: a partial frame has been pending, with no frame completed, since before
  // `since` (a sender too slow, or one holding memory on purpose).
  bool IsFrameStalledSince(MonoTime since) const {
    return partial_charged_ > 0 && frame_progress_at_ < since;
  }
  // Reactor thread: server side, sends a connection-level error frame (call id -2, `code`) as far
  // as the socket takes it now; then, either side, closes with `reason`.
  void CloseWithFatalError(ErrorStatusPB::RpcErrorCodePB code, const Status& reason);

 private:
  // The parts reach back for the transport, the reactor-thread state and the steps they trigger.
  friend class ConnectionWriter;
  friend class CallerReads;
  friend class CallDeadlines;
  // Server side: a stream's frame (InboundCall::is_stream_frame) goes to its stream.
  Status HandleStreamFrame(const InboundCall& frame);

  // TransportHost: reactor thread.
  void OnTransportConnected() override;
  void OnBytesReceived(size_t bytes, MonoTime now) override;
  void OnPreamble(Slice preamble) override;
  void OnFrame(BlockSlice&& frame) override;
  void OnWritable() override { writer_.OnWritable(); }
  void OnTransportFailed(const Status& reason) override;
  void OnProtocolError(const Status& reason) override;

  // NegotiationHost (connection_negotiation.cc): reactor thread.
  NegotiationHost* AsNegotiationHost() { return this; }
  void SendConnectionBytes(BlockSlice bytes) override;
  TransportCapabilities transport_capabilities() const override { return caps_; }
  TransportSecurity transport_security() const override { return transport_->security(); }
  std::unique_ptr<TransportUpgrade> NewTransportUpgrade() override;
  std::function<void()> NegotiationResumer() override;

  static void OnNegotiationTimeout(struct ev_loop* loop, ev_timer* w, int revents);
  // Client side: `call`'s deadline passed (its own timer, or CallDeadlines'): finishes it timed
  // out and tells the server.
  static void OnCallTimeout(OutboundCall* call, void* arg);
  // Client side: the call waiting (sent or not) under `call_id`, or nullptr.
  OutboundCall* FindWaitingCall(int32_t call_id);

  void HandleNegotiationFrame(Slice frame);
  // After a negotiation step (a frame, or Resume): fails the negotiation, waits, or opens.
  void AfterNegotiationStep(Result<bool> done);
  // The upgrade's Prepare is done: the negotiation goes on, if the connection still negotiates.
  void ResumeNegotiation();
  // Reactor thread: a `ready` called later reaches nothing (negotiation over, or closing).
  void DisarmResumer();
  // Server side: the first bytes were a TLS ClientHello (`hello_start`): go on over TLS.
  void StartServerTls(Slice hello_start);
  // Logs why, sends what the negotiation queued (a server's refusal) and closes.
  void FailNegotiation(const Status& reason);
  // Client side: queues the calls that waited for the connection, and sends later ones at once.
  void SendPendingCalls();
  // `upgrade`: the transport both sides agreed to continue on (RDMA), or nullptr.
  void MarkOpen(std::unique_ptr<TransportUpgrade> upgrade);

  // `*charged`: the frame's bytes already counted in memory_; set to 0 once a call holds them.
  Status HandleCallFrame(BlockSlice&& frame, size_t* charged);
  // A call that opens a stream: its stream joins the table (or the call is refused), then it
  // goes on as any call.
  Status HandleStreamOpen(std::unique_ptr<InboundCall> call, size_t* charged);
  // A call from here on: tracked for cancellation, holding its frame's memory, in flight.
  void TakeInboundCall(InboundCall* call, size_t* charged);
  // Takes `frame` (by reference: no copy of the slice on the way to the call).
  Status HandleResponseFrame(BlockSlice&& frame);
  // Server side: a control frame's body (ControlPB). Unknown kinds and call ids are ignored.
  Status HandleControlFrame(Slice body);
  // Client side: tells the server `call` was given up on, when it may know the call (its frame
  // started out) and understands the frame.
  void SendCancelFrame(const OutboundCall& call);
  // Client side, as the connection opens: sends the cancels held while it negotiated, when the
  // server takes them.
  void SendHeldCancels();
  // A ControlPB of `kind` (naming `call_id` when not negative), staged for the next flush.
  void QueueControlFrame(int kind, int32_t call_id);
  // Server side: counts the transport's buffered (partial frame) bytes in memory_.
  void SyncPartialCharge();
  // Server side: this connection or its messenger holds more inbound memory than allowed. Pauses
  // reading; or, when all the connection holds is one partial frame already above its own limit
  // (it could never fit), refuses it: FATAL_INVALID_FRAME and close.
  void OnInboundMemoryOverLimit();
  void SetReadsPaused(bool paused);

  // Members are grouped so that small ones fill what would be padding: every idle connection
  // holds one of these (connection_memory-test.cc bounds the heap an idle one holds).
  Reactor* const reactor_;
  const Direction direction_;
  State state_;
  bool fatal_error_sent_ = false;  // CloseWithFatalError ran: nothing more to decide
  bool reads_paused_ = false;
  // Client side: calls go out as they come (set once the negotiation allows it).
  bool sending_calls_ = false;
  // Both sides: the peer negotiated CANCELLATION (set as the connection opens). Client: cancel
  // frames may go to it. Server: its calls are tracked in cancels_.
  bool peer_cancels_ = false;
  // Client side: the server negotiated STREAMS (set as the connection opens).
  bool peer_streams_ = false;
  const Sockaddr remote_;
  const MessengerOptions& options_;
  // Replaced only on the reactor thread, under the writer's lock; so the reactor reads it
  // without the lock, a worker's or caller's lone write under it. (Not GUARDED_BY: the analysis
  // cannot express "writes need the lock and the owning thread, reads need either".)
  std::unique_ptr<Transport> transport_;
  TransportCapabilities caps_;  // transport_'s; changed with it, read like it
  std::vector<std::unique_ptr<Transport>> retired_transports_;  // reactor thread
  // What only a connection still negotiating needs, dropped once open (an idle open connection
  // keeps none of it). Made in the constructor; its timer runs from Start() until MarkOpen() or
  // Shutdown().
  struct Negotiating {
    std::unique_ptr<ServerNegotiation> server;  // one of them, by direction
    std::unique_ptr<ClientNegotiation> client;
    ev_timer timer;
  };
  std::unique_ptr<Negotiating> negotiating_;
  // NegotiationResumer's way back to this connection from another thread, made on first use;
  // disarmed (on the reactor thread) when negotiation ends or the connection closes, before the
  // connection or its reactor can go (connection_negotiation.cc).
  struct ResumeSlot;
  std::shared_ptr<ResumeSlot> resume_slot_;  // reactor thread

  ConnectionWriter writer_{this};
  CallerReads caller_reads_{this, &writer_};  // client side
  // Client side: calls made before the connection could take them (while connecting), sent right
  // after the negotiation request.
  std::vector<scoped_refptr<OutboundCall>> pending_calls_;
  // Client side: calls sent (or being sent) and awaiting their response, by call id: one flat
  // array, no allocation per call.
  using AwaitingMap = IntMap<scoped_refptr<OutboundCall>>;
  AwaitingMap awaiting_response_;
  CallDeadlines deadlines_{this};  // client side
  // Client side: calls sent behind the hello and given up on before the server's reply.
  std::vector<int32_t> held_cancels_;
  MonoTime last_ping_;  // client side: when MaybePing last sent one
  // Server side: calls handed to the service pool and not yet answered.
  std::atomic<int64_t> inbound_in_flight_{0};
  InboundCancels cancels_;     // server side, of a client that negotiated CANCELLATION
  StreamTable streams_{this};  // both sides

  // Bytes held for inbound calls (server side; the calls consume and release their share). Held
  // in place, no allocation of its own; a client connection's stays unused (inbound_memory()).
  MemoryTracker memory_;
  // Server side, reactor thread: the transport's buffered bytes as last counted in memory_, and
  // when a frame last completed (or the current partial one began).
  size_t partial_charged_ = 0;
  MonoTime frame_progress_at_;
  CallerIdentity identity_;  // set in MarkOpen, then read-only
  std::atomic<bool> peer_tracks_results_{false};
  std::atomic<bool> peer_reads_compression_{false};

  MonoTime created_;
  MonoTime last_activity_;
  uint64_t bytes_received_ = 0;
};

}  // namespace rrpc::rpc
