// CallerReads: a client connection's synchronous-caller path (docs/architecture.md, "The
// synchronous call path"). A thread making a synchronous call writes its call itself when nothing
// else waits to be written (saving the hand-off to the reactor); and when its call is all the
// connection has, the reactor parks its reads so that the caller reads its own response
// (woken by the kernel from its own recv(), not by the reactor). Anything that is not exactly its
// response goes back to the reactor with the read side, and the connection goes on as if the
// reactor had read it.
//
// Threads: TrySend, ReadResponse and TimeOut run on the caller's thread; the rest on the
// reactor's. The state is guarded by the write side's lock (ConnectionWriter::mu()), because a
// caller takes the reads and writes its call in one step: a call is finished by whoever takes it
// from caller_call_ under that lock, so still exactly once.
//
// Ownership: a member of its Connection (conn_), beside the ConnectionWriter it writes through.
// caller_call_ holds a reference to the one call a caller wrote itself until its response, its
// timeout, a cancel or the connection's shutdown takes it.
#pragma once

#include <atomic>
#include <cstdint>

#include "rpc/core/connection_writer.h"
#include "rpc/core/outbound_call.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"

namespace rrpc::rpc {

class Connection;

// TrySend's answer. kNotSent: nothing done. kSent: the response comes back through the reactor;
// the call has no timer there, so past its deadline the caller must call TimeOut().
// kSentCallerReads: the reactor's reads are parked and the caller owns them: it must call
// ReadResponse() next.
enum class CallerSend { kNotSent, kSent, kSentCallerReads };

class CallerReads {
 public:
  CallerReads(Connection* conn, ConnectionWriter* writer) : conn_(conn), writer_(writer) {}
  CallerReads(const CallerReads&) = delete;
  CallerReads& operator=(const CallerReads&) = delete;

  // Caller thread: writes `call` when nothing waits to be written, no other caller's call is out
  // this way and the transport allows writes from other threads (Connection::
  // TrySendCallFromCaller).
  CallerSend TrySend(const scoped_refptr<OutboundCall>& call) RRPC_EXCLUDES(writer_->mu());
  // Caller thread, after kSentCallerReads: reads the stream itself until `call`'s response comes
  // (then finishes the call here) or its deadline passes (finishes it timed out); anything else
  // (another frame, a bad one, the stream's end) it hands, with the read side, back to the
  // reactor. Returns without waiting for the reactor.
  void ReadResponse(const scoped_refptr<OutboundCall>& call) RRPC_EXCLUDES(writer_->mu());
  // Any thread: finishes `call` (sent by TrySend) as timed out, on the reactor, unless it has
  // finished by then.
  void TimeOut(scoped_refptr<OutboundCall> call);

  // Reactor thread: calls may be written by callers from now on (the preamble and the
  // negotiation request are queued ahead of them).
  void AllowWrites() RRPC_EXCLUDES(writer_->mu());
  // Reactor thread, a response to `call_id` that no asynchronous call awaits: the caller's call
  // of that id, taken (the caller of this finishes it), or nullptr. Having taken it, parks the
  // reads when nothing else waits on the connection, so the next caller reads its response.
  scoped_refptr<OutboundCall> TakeAnswered(int32_t call_id) RRPC_EXCLUDES(writer_->mu());
  // Reactor thread: takes `call` if it is the caller's call (a cancel); true when it was.
  bool Take(const OutboundCall* call) RRPC_EXCLUDES(writer_->mu());
  // Reactor thread: a caller's call awaits its response.
  bool HasCall() RRPC_EXCLUDES(writer_->mu());
  // Reactor thread: a call now waits for a response that the reactor must read (an asynchronous
  // call, a second caller's): reads resume now if parked, or once the caller owning them is done.
  void EnsureReactorReads() RRPC_EXCLUDES(writer_->mu());
  // Reactor thread, from Connection::Shutdown after the writer closed: takes the caller's call
  // (for the shutdown to fail) and tells whether a caller reads the socket now.
  scoped_refptr<OutboundCall> TakeOnClose(bool* caller_reading) RRPC_EXCLUDES(writer_->mu());

  // Any thread: what callers read (added to the reactor's counts for /connections and the idle
  // scan).
  uint64_t bytes_received() const { return bytes_received_.load(std::memory_order_relaxed); }
  MonoTime last_read() const {
    return MonoTime::FromNanoseconds(read_at_ns_.load(std::memory_order_relaxed));
  }

 private:
  // Who reads the socket:
  //  kReactor: the reactor (its watcher runs, or a task restarting it is on its way);
  //  kParked: nobody (the transport's watcher is stopped; ParkReads); nothing is outstanding;
  //  kCaller: the synchronous caller whose call is caller_call_, inside ReadResponse.
  // Only the reactor leaves kReactor (MaybeParkReads); only a caller leaves kParked (taking the
  // reads in TrySend) or kCaller (ReadResponse); the reactor also leaves kParked when it needs
  // reads (EnsureReactorReads). Changed under the lock; atomic so that the reactor reads it
  // without the lock (kReactor cannot change under it).
  enum class ReadOwner : uint8_t { kReactor, kParked, kCaller };

  // Reactor thread, having just taken caller_call_'s response: when nothing else waits on the
  // connection, stops the reactor's reads so the next caller reads its response itself.
  void MaybeParkReads() RRPC_REQUIRES(writer_->mu());
  // Reactor thread, from a caller's hand-back: `frame` (if any) first, as if just read, then
  // reads go on (ResumeReads(read_now)).
  void ResumeReadsFromCaller(BlockSlice* frame) RRPC_EXCLUDES(writer_->mu());
  // Caller thread, reads parked, about to write at about `now`: true when the peer has sent
  // nothing (no bytes, no close) since they were parked, or when they were parked less than
  // sync_peer_check_after ago (then without looking: a poll() saved per call in a thread's call
  // loop).
  bool ParkedStreamQuiet(MonoTime now) RRPC_REQUIRES(writer_->mu());
  // Caller thread, having given parked reads back (kReactor) because the stream was not quiet:
  // has the reactor read what came and waits (until `deadline`) until it has, so a close has shut
  // the connection down before the caller queues its call (on a fresh one).
  void ResumeReadsAndWait(MonoTime deadline);

  Connection* const conn_;
  ConnectionWriter* const writer_;
  std::atomic<ReadOwner> read_owner_{ReadOwner::kReactor};
  // Set by the reactor while a caller owns the reads and a call that the reactor must read was
  // queued: the caller hands the reads back instead of parking them.
  bool reactor_wants_reads_ RRPC_GUARDED_BY(writer_->mu()) = false;
  // Calls may be written now (AllowWrites).
  bool callers_may_write_ RRPC_GUARDED_BY(writer_->mu()) = false;
  // The call a synchronous caller wrote itself, awaiting its response.
  scoped_refptr<OutboundCall> caller_call_ RRPC_GUARDED_BY(writer_->mu());
  // When the reads were last parked (about when the last response was read).
  MonoTime parked_at_ RRPC_GUARDED_BY(writer_->mu());
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<int64_t> read_at_ns_{0};
};

}  // namespace rrpc::rpc
