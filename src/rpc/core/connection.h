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

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rpc/core/negotiation.h"
#include "rpc/core/outbound_call.h"
#include "rpc/transport/transport.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "util/int_map.h"
#include "util/memory_tracker.h"
#include "util/ring_queue.h"

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
  void Flush() RRPC_EXCLUDES(write_mu_);
  // A worker thread, server side, after `call` has its response: when the call is the only one
  // this connection has in flight, nothing waits to be written and the transport allows writes
  // from other threads, there is no batch for the reactor to join it to, so the worker writes it
  // now and saves the hand-off to the reactor (and that thread's wakeup). Returns false, having
  // done nothing, otherwise: the caller then hands the call to the reactor. On true the
  // connection owns the call (it is written, or queued for the reactor to finish).
  bool TryWriteLoneResponse(InboundCall* call) RRPC_EXCLUDES(write_mu_);
  // A thread making a synchronous call, client side: the same for a request. When nothing waits
  // to be written, no other caller's call is out this way and the transport allows writes from
  // other threads (concurrent_write), the caller writes `call` itself and saves the hand-off to
  // the reactor (a wakeup, and the reactor's loop turn before the write). kNotSent: nothing done.
  // kSent: the response comes back through the reactor; the call has no timer there, so past its
  // deadline the caller must call TimeOutCallerCall(). kSentCallerReads: the reactor's reads are
  // parked and the caller owns them: it must call ReadResponseAsCaller() next.
  enum class CallerSend { kNotSent, kSent, kSentCallerReads };
  CallerSend TrySendCallFromCaller(const scoped_refptr<OutboundCall>& call)
      RRPC_EXCLUDES(write_mu_);
  // The caller thread, after kSentCallerReads (connection_caller_read.cc): reads the stream itself
  // until `call`'s response comes (then finishes the call here) or its deadline passes (finishes
  // it timed out); anything else (another frame, a bad one, the stream's end) it hands, with the
  // read side, back to the reactor, which then goes on as if it had read it (and finishes the
  // call, or the caller times it out as after kSent). Returns without waiting for the reactor.
  void ReadResponseAsCaller(const scoped_refptr<OutboundCall>& call) RRPC_EXCLUDES(write_mu_);
  // Any thread: finishes `call` (sent by TrySendCallFromCaller) as timed out, on the reactor,
  // unless it has finished by then.
  void TimeOutCallerCall(scoped_refptr<OutboundCall> call) RRPC_EXCLUDES(write_mu_);
  // Cancellation (connection_cancel.cc; docs/wire-format.md, "Control frames").
  // Client side, reactor thread: `call` (unfinished, waiting on this connection) was cancelled:
  // finishes it Aborted now and, when its frame has started out and the server negotiated
  // CANCELLATION, tells the server with a cancel frame.
  void CancelCall(OutboundCall* call);
  // Server side, any thread, once per tracked call: the call answers now (its Respond*()), so a
  // cancel frame no longer reaches it; drops the cancel callback it registered. From inside that
  // callback too (it may answer the call).
  void UntrackForCancel(InboundCall* call) RRPC_EXCLUDES(cancel_mu_);
  // Server side, the handler's thread (RpcContext::OnCancel): runs `callback` once when the call
  // is cancelled, on the reactor that read the cancel frame; at once, on this thread, when it was
  // cancelled already; never when the client cannot cancel (it did not negotiate CANCELLATION).
  void SetCancelCallback(InboundCall* call, std::function<void()> callback)
      RRPC_EXCLUDES(cancel_mu_);

  // Reactor thread: hands the byte stream under the current transport (Transport::Detach) to
  // `make`, and continues the connection over the transport it returns: negotiation upgrading the
  // connection (TLS after the first bytes, RDMA after the TCP bootstrap). Safe from inside the
  // current transport's callbacks (it is kept until the connection goes). On error the
  // connection is shut down with it.
  using TransportMaker = std::function<Result<std::unique_ptr<Transport>>(DetachedStream)>;
  Status UpgradeTransport(const TransportMaker& make);
  // Reactor thread: closes the transport, fails every call waiting on it with `reason`.
  // Idempotent.
  void Shutdown(const Status& reason) RRPC_EXCLUDES(write_mu_);

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
  MonoTime last_activity() const {
    return std::max(last_activity_,
                    MonoTime::FromNanoseconds(caller_read_at_ns_.load(std::memory_order_relaxed)));
  }
  MonoTime created() const { return created_; }
  // Calls this connection waits on (client) or has in flight in the server (server).
  size_t calls_in_flight() const;
  // True when nothing is in flight or queued: the connection may be closed as idle.
  bool IsIdle() RRPC_EXCLUDES(write_mu_);
  // True when bytes wait to be written and none has gone out since `since`: the peer stopped
  // reading (a server's responses pile up, paused reads keep its memory bounded, but the
  // connection would stay forever).
  bool IsWriteStalledSince(MonoTime since) RRPC_EXCLUDES(write_mu_);
  // Who the peer is (server side: the client's user and how it authenticated; client side: the
  // user the server says we are). Fixed when the connection opens; read by workers after that.
  const CallerIdentity& identity() const { return identity_; }
  // Both sides negotiated EXACTLY_ONCE (the server keeps results of tracked calls). Set when the
  // connection opens; any thread.
  bool peer_tracks_results() const { return peer_tracks_results_.load(std::memory_order_acquire); }
  uint64_t bytes_received() const {
    return bytes_received_ + caller_bytes_received_.load(std::memory_order_relaxed);
  }
  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
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
  // TransportHost: reactor thread.
  void OnTransportConnected() override;
  void OnBytesReceived(size_t bytes, MonoTime now) override;
  void OnPreamble(Slice preamble) override;
  void OnFrame(BlockSlice&& frame) override;
  void OnWritable() override;
  void OnTransportFailed(const Status& reason) override;
  void OnProtocolError(const Status& reason) override;

  NegotiationHost* AsNegotiationHost() { return this; }
  // NegotiationHost: reactor thread.
  void SendConnectionBytes(BlockSlice bytes) override;
  TransportCapabilities transport_capabilities() const override { return caps_; }
  TransportSecurity transport_security() const override { return transport_->security(); }
  std::unique_ptr<TransportUpgrade> NewTransportUpgrade() override;
  std::function<void()> NegotiationResumer() override;

  static void OnNegotiationTimeout(struct ev_loop* loop, ev_timer* w, int revents);
  static void OnCallTimeout(OutboundCall* call, void* arg);
  // Client side (connection_deadlines.cc): calls' deadlines. A call whose deadline is not before
  // the last one watched joins call_deadlines_ (one timer for all of them); an earlier one gets a
  // timer of its own (OutboundCall::StartTimer).
  void WatchDeadline(OutboundCall* call);
  // A response arrived for `call_id`: forgets the deadlines of calls no longer waiting at the
  // front of call_deadlines_ (each looked up at most once or twice), so it holds no more than the
  // calls in flight.
  void ForgetAnsweredDeadlines(int32_t call_id);
  // Drops the deadlines at the front of call_deadlines_ whose calls are no longer waiting.
  void DropAnsweredDeadlinesAtFront();
  static void OnCallDeadlineTimer(struct ev_loop* loop, ev_timer* w, int revents);
  // Times out the calls whose deadlines passed, then sleeps until the first one still waiting.
  void ExpireCallDeadlines();
  // (Re)arms call_deadline_timer_ for the front of call_deadlines_, `now` being about now.
  void ArmCallDeadlineTimer(MonoTime now);
  // The call waiting (sent or not) under `call_id`, or nullptr.
  OutboundCall* FindWaitingCall(int32_t call_id);

  void HandleNegotiationFrame(Slice frame);
  // After a negotiation step (a frame, or Resume): fails the negotiation, waits, or opens.
  void AfterNegotiationStep(Result<bool> done);
  // connection_resume.cc: the upgrade's Prepare is done: the negotiation goes on, if the
  // connection still negotiates.
  void ResumeNegotiation();
  // Reactor thread: a `ready` called later reaches nothing (negotiation over, or closing).
  void DisarmResumer();
  // Server side: the first bytes were a TLS ClientHello (`hello_start`): go on over TLS.
  void StartServerTls(Slice hello_start);
  // Logs why, sends what the negotiation queued (a server's refusal) and closes.
  void FailNegotiation(const Status& reason);
  // `*charged`: the frame's bytes already counted in memory_; set to 0 once a call holds them.
  Status HandleCallFrame(BlockSlice&& frame, size_t* charged);
  // Takes `frame` (by reference: no copy of the slice on the way to the call).
  Status HandleResponseFrame(BlockSlice&& frame);
  // Server side: a control frame's body (ControlPB). Unknown kinds and call ids are ignored.
  Status HandleControlFrame(Slice body);
  // A worker's lone response or a synchronous caller's call, the write queue empty: queues
  // `transfer` and writes it as far as the transport takes it now, on the calling thread. True
  // when it went out whole (it is off the queue; *transport_holds tells whether the transport
  // kept part of it, e.g. a TLS record, for the reactor to finish); false when the reactor must
  // write the rest (counted in unsent_bytes_; the transfer stays queued).
  bool WriteAloneLocked(OutboundTransfer* transfer, bool* transport_holds) RRPC_REQUIRES(write_mu_);
  // Server side: the cancel of `call_id`; a no-op when no call of that id is in flight.
  void CancelInboundCall(int32_t call_id) RRPC_EXCLUDES(cancel_mu_);
  // Server side, reactor thread: a new call of a client that may cancel it: findable by id
  // (unless another call in flight holds the id in the same place: a forged duplicate may stay
  // uncancellable).
  void TrackForCancel(InboundCall* call) RRPC_EXCLUDES(cancel_mu_) {
    if (!TrackForCancelInSlot(call)) TrackForCancelInMap(call);
  }
  // Reactor thread: puts `call` in a free cancel slot; false when it finds none.
  bool TrackForCancelInSlot(InboundCall* call);
  // Reactor thread: the slot holding the call of `call_id`, or nullptr.
  std::atomic<InboundCall*>* FindCancelSlot(int32_t call_id);
  void TrackForCancelInMap(InboundCall* call) RRPC_EXCLUDES(cancel_mu_);
  // Client side: tells the server `call` was given up on, when it may know the call (its frame
  // started out) and understands the frame.
  void SendCancelFrame(const OutboundCall& call);
  // Client side, as the connection opens: sends the cancels held while it negotiated, when the
  // server takes them.
  void SendHeldCancels();
  void QueueCancelFrame(int32_t call_id);
  // A ControlPB of `kind` (naming `call_id` when not negative), staged for the next flush.
  void QueueControlFrame(int kind, int32_t call_id);
  // Client side: queues the calls that waited for the connection, and sends later ones at once.
  void SendPendingCalls();
  // `upgrade`: the transport both sides agreed to continue on (RDMA), or nullptr.
  void MarkOpen(std::unique_ptr<TransportUpgrade> upgrade);
  // Reactor thread: a call or response to write, staged (no lock) until the end of this loop
  // iteration's Flush(), which moves what is staged to the write queue under one lock.
  void QueueTransfer(OutboundTransfer* transfer);
  // Reactor thread: connection bytes (preamble, negotiation, a fatal error frame) straight to the
  // write queue, behind what is staged: nothing written later, by any thread, may pass them.
  void QueueTransferNow(OutboundTransfer* transfer) RRPC_EXCLUDES(write_mu_);
  // Server side: counts the transport's buffered (partial frame) bytes in memory_.
  void SyncPartialCharge();
  // Reactor thread, after a frame was handled: flushes now when at least kEarlyFlushBytes wait
  // (connection.cc says why). Inline: checked after every frame.
  void FlushEarlyIfLarge() {
    if (unsent_bytes_.load(std::memory_order_relaxed) >= kEarlyFlushBytes) FlushEarly();
  }
  void FlushEarly();
  // Server side: this connection or its messenger holds more inbound memory than allowed. Pauses
  // reading; or, when all the connection holds is one partial frame already above its own limit
  // (it could never fit), refuses it: FATAL_INVALID_FRAME and close.
  void OnInboundMemoryOverLimit();
  void SetReadsPaused(bool paused);
  void NotifyWhenWritable(bool on);

  // Reads by a synchronous caller (connection_caller_read.cc).
  // Reactor thread, having just taken caller_call_'s response: when nothing else waits on this
  // connection, stops the reactor's reads so the next caller reads its response itself.
  void MaybeParkReads() RRPC_REQUIRES(write_mu_);
  // Reactor thread: a call now waits for a response that the reactor must read (an
  // asynchronous call, a second caller's): reads resume now if parked, or once the caller owning
  // them is done.
  void EnsureReactorReads() RRPC_EXCLUDES(write_mu_);
  // Reactor thread, from a caller's hand-back: `frame` (if any) first, as if just read, then
  // reads go on (ResumeReads(read_now)).
  void ResumeReadsFromCaller(BlockSlice* frame);
  // Caller thread, reads parked, about to write at about `now`: true when the peer has sent
  // nothing (no bytes, no close) since they were parked, or when they were parked less than
  // options_.sync_peer_check_after ago (then without looking: a poll() saved per call in a
  // thread's call loop).
  bool ParkedStreamQuiet(MonoTime now) RRPC_REQUIRES(write_mu_);
  // Caller thread, having given parked reads back (read_owner_ kReactor) because the stream was
  // not quiet: has the reactor read what came and waits (until `deadline`) until it has, so a
  // close has shut this connection down before the caller queues its call (on a fresh one).
  void ResumeReadsAndWait(MonoTime deadline) RRPC_EXCLUDES(write_mu_);

  // Members are grouped so that small ones fill what would be padding: every idle connection
  // holds one of these (connection_memory-test.cc bounds the heap an idle one holds).
  Reactor* const reactor_;
  const Direction direction_;
  State state_;
  const Sockaddr remote_;
  const MessengerOptions& options_;
  // Replaced only on the reactor thread, under write_mu_; so the reactor reads it without the
  // lock, a worker's lone write under it. (Not GUARDED_BY: the analysis cannot express "writes
  // need the lock and the owning thread, reads need either".)
  std::unique_ptr<Transport> transport_;
  TransportCapabilities caps_;  // transport_'s; changed with it, read like it
  bool write_armed_ = false;
  bool fatal_error_sent_ = false;  // CloseWithFatalError ran: nothing more to decide
  bool reads_paused_ = false;
  // Client side: calls go out as they come (set once the negotiation allows it).
  bool sending_calls_ = false;
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
  // connection or its reactor can go (connection_resume.cc).
  struct ResumeSlot;
  std::shared_ptr<ResumeSlot> resume_slot_;  // reactor thread

  // The write side. Held while writing to the transport, so one thread writes at a time; never
  // held while a transfer's TransferDone/TransferAborted runs (those may queue more work).
  Mutex write_mu_;
  // Set by Shutdown: no thread writes to the transport any more.
  bool write_closed_ RRPC_GUARDED_BY(write_mu_) = false;
  // Client side: who reads the socket (docs/architecture.md, "The synchronous call path").
  //  kReactor: the reactor (its watcher runs, or a task restarting it is on its way);
  //  kParked: nobody (the transport's watcher is stopped; ParkReads); nothing is outstanding;
  //  kCaller: the synchronous caller whose call is caller_call_, inside ReadResponseAsCaller.
  // Only the reactor leaves kReactor (MaybeParkReads); only a caller leaves kParked (taking the
  // reads in TrySendCallFromCaller) or kCaller (ReadResponseAsCaller); the reactor also leaves
  // kParked when it needs reads (EnsureReactorReads). Changed under write_mu_; atomic so that
  // the reactor reads it without the lock (kReactor cannot change under it).
  enum class ReadOwner : uint8_t { kReactor, kParked, kCaller };
  std::atomic<ReadOwner> read_owner_{ReadOwner::kReactor};
  // Set by the reactor while a caller owns the reads and a call that the reactor must read was
  // queued: the caller hands the reads back instead of parking them.
  bool reactor_wants_reads_ RRPC_GUARDED_BY(write_mu_) = false;
  // Client side: calls may be written now (the preamble and the negotiation request are queued
  // ahead of them); set with sending_calls_.
  bool callers_may_write_ RRPC_GUARDED_BY(write_mu_) = false;
  // Transfers to write, in order. The connection owns the references they represent.
  TransferQueue write_queue_ RRPC_GUARDED_BY(write_mu_);
  // Reactor thread only: calls and responses the reactor queued in this loop iteration, not yet
  // in write_queue_ (QueueTransfer); Flush() appends them under the lock it takes anyway, so the
  // reactor takes write_mu_ once per batch instead of once more per frame. A worker's or
  // caller's lone write may go out before them: whole frames of independent calls, so only their
  // order changes; connection bytes never wait here (QueueTransferNow).
  TransferQueue staged_;
  // Bytes of the write queue not yet written; reads pause while it is too high (server side).
  // Changed under write_mu_; read without it for backpressure.
  std::atomic<size_t> unsent_bytes_{0};
  // Staged bytes from which a frame's handling flushes them at once (FlushEarlyIfLarge).
  static constexpr size_t kEarlyFlushBytes = 32 * 1024;
  // Client side: the call a synchronous caller wrote itself (TrySendCallFromCaller), awaiting
  // its response.
  scoped_refptr<OutboundCall> caller_call_ RRPC_GUARDED_BY(write_mu_);
  // When the reads were last parked (about when the last response was read).
  MonoTime parked_at_ RRPC_GUARDED_BY(write_mu_);
  // What callers read (added to bytes_received_ and last_activity_ for /connections and the
  // idle scan).
  std::atomic<uint64_t> caller_bytes_received_{0};
  std::atomic<int64_t> caller_read_at_ns_{0};
  // Client side: calls made before the connection could take them (while connecting), sent right
  // after the negotiation request.
  std::vector<scoped_refptr<OutboundCall>> pending_calls_;
  // Client side: calls sent (or being sent) and awaiting their response, by call id: one flat
  // array, no allocation per call.
  using AwaitingMap = IntMap<scoped_refptr<OutboundCall>>;
  AwaitingMap awaiting_response_;
  // Client side: the deadlines of calls, in the order they were queued and so in nondecreasing
  // order (a call whose deadline would break the order has a timer of its own), and the one
  // timer that watches them, armed at the first. It is not stopped when calls are answered: it
  // fires at the first deadline still listed and re-arms for the next one still waiting. So the
  // common case (every call of a connection with the same timeout) starts and stops no timer per
  // call.
  struct CallDeadline {
    MonoTime deadline;
    int32_t call_id;
  };
  RingQueue<CallDeadline> call_deadlines_;  // allocates nothing until a call is watched
  ev_timer call_deadline_timer_;
  MonoTime call_deadline_timer_at_;  // the deadline the timer is armed for, while active
  // Server side: calls handed to the service pool and not yet answered.
  std::atomic<int64_t> inbound_in_flight_{0};
  // Both sides: the peer negotiated CANCELLATION (set as the connection opens). Client: cancel
  // frames may go to it. Server: its calls are tracked in cancellable_.
  bool peer_cancels_ = false;
  // Client side: calls sent behind the hello and given up on before the server's reply.
  std::vector<int32_t> held_cancels_;
  MonoTime last_ping_;  // client side: when MaybePing last sent one
  // Server side: the calls in flight that a cancel frame may reach; a call leaves as it answers.
  // Most sit in cancel slots without a lock: only the reactor fills a slot (TrackForCancel) or
  // marks it busy while it flags the call for a cancel (its pointer then stays valid: the
  // answering thread empties the slot with a compare-and-swap from the call to nullptr, waiting
  // out a busy slot). A call goes to the narrow slots by call id modulo their count; when that
  // one is taken, to the wide slots (made the first time, for a connection with many calls in
  // flight), at the first free one of kCancelProbes places from its id. A call that finds none,
  // and one whose handler asked for a cancel callback, is in cancellable_ under cancel_mu_
  // instead. Bounded by the calls in flight (and so by the inbound memory limits).
  static constexpr int kNarrowCancelSlots = 4;
  static constexpr int kWideCancelSlots = 64;
  static constexpr int kCancelProbes = 4;
  template <int N>
  struct CancelSlots {
    static_assert((N & (N - 1)) == 0, "a power of two");
    std::atomic<InboundCall*> call[N] = {};
    int32_t call_id[N] = {};  // reactor only: the id of the call it last put there
    // Reactor thread: the i-th place from `id` (modulo N).
    static int Index(int32_t id, int i) { return (id + i) & (N - 1); }
  };
  // Made by the reactor: the narrow slots with the first tracked call, the wide ones with the
  // first call whose narrow slot is taken.
  std::unique_ptr<CancelSlots<kNarrowCancelSlots>> cancel_slots_;
  std::unique_ptr<CancelSlots<kWideCancelSlots>> wide_cancel_slots_;
  Mutex cancel_mu_;
  IntMap<InboundCall*> cancellable_ RRPC_GUARDED_BY(cancel_mu_);

  // Bytes held for inbound calls (server side; the calls consume and release their share). Held
  // in place, no allocation of its own; a client connection's stays unused (inbound_memory()).
  MemoryTracker memory_;
  // Server side, reactor thread: the transport's buffered bytes as last counted in memory_, and
  // when a frame last completed (or the current partial one began).
  size_t partial_charged_ = 0;
  MonoTime frame_progress_at_;
  CallerIdentity identity_;  // set in MarkOpen, then read-only
  std::atomic<bool> peer_tracks_results_{false};

  MonoTime created_;
  MonoTime last_activity_;
  // When the write queue last went from empty to non-empty or the transport last took bytes after
  // being full.
  MonoTime last_write_progress_ RRPC_GUARDED_BY(write_mu_);
  uint64_t bytes_received_ = 0;
  std::atomic<uint64_t> bytes_sent_{0};  // changed under write_mu_
};

}  // namespace rrpc::rpc
