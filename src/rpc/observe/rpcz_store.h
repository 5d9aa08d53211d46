// RpczStore: what the /rpcz page shows about a server's calls: the calls in flight now (method,
// peer, elapsed time, queued / running / sending), and per method the last few slow calls and
// the last few failed calls, each with its timeline: arrival, started (so the time it waited in
// the service queue), responded (the time in its handler) and done (the time to send).
//
// It is built to sit on the call path at almost no cost:
//  - In-flight calls are an intrusive doubly linked list: the links live in an RpczCallEntry
//    embedded in each InboundCall, so tracking allocates nothing. The list is split in stripes,
//    one per reactor (the reactor links a call when it queues it and unlinks it when the
//    response is written, so each stripe's mutex is in practice taken only by its own reactor
//    and, rarely, by a page reading the list). There is no global lock.
//  - The timeline stamps set by workers are relaxed atomic stores. Tracking adds two clock reads
//    per call (responded, done) to those the call path takes anyway (arrival, started).
//  - Only a slow or failed call costs more: it is copied into a fixed-size ring of its method.
//    Rings are found through a lock-free table keyed by method; a ring's own mutex is only
//    try-locked on the call path (a sample is dropped rather than waited for), and at most one
//    sample per ring per `min_sample_interval` is taken, so a storm of failures stays cheap.
//
// Thread-safety: every RpczStore method is thread-safe. An RpczCallEntry belongs to its call and
// is used by whichever thread owns the call at the time (see InboundCall). The store must
// outlive every entry it tracks (the ServicePool owns it and joins its workers first).
//
//   const RpczStore* rpcz = messenger->rpcz_store();
//   for (const RpczInFlightCall& c : rpcz->ListInFlight(1000).calls) ...
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::rpc {

class ErrorStatusPB;
class RpczStore;

// Where a call in flight is.
enum class RpczCallState {
  kQueued,   // Waiting in the service queue for a worker.
  kRunning,  // A worker runs its handler (or the handler kept it and has not responded yet).
  kSending,  // Responded; the reactor is writing the response.
};
const char* RpczCallStateName(RpczCallState state);  // "queued", "running", "sending"

// A call's trace context (docs/tracing.md): all zeros when the caller sent none. span_id is the
// server's own span for the call, parent_span_id the caller's.
struct RpczTraceIds {
  uint64_t trace_id_high = 0;
  uint64_t trace_id_low = 0;
  uint64_t span_id = 0;
  uint64_t parent_span_id = 0;
  uint8_t flags = 0;

  bool present() const { return span_id != 0; }
  bool sampled() const { return (flags & 1) != 0; }
  bool SameTrace(uint64_t high, uint64_t low) const {
    return present() && trace_id_high == high && trace_id_low == low;
  }
};

// What /rpcz shows of an open stream (docs/streams.md): messages and bytes each way (bodies and
// sidecars), the sender's credit left, what the application has not read yet, and how long the
// writer has been waiting for credit (zero when it is not).
struct RpczStreamStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  int64_t send_credit = 0;
  uint64_t unread_bytes = 0;
  MonoDelta stalled;
};

// A stream as the store sees it: its call's owner sets RpczCallInfo::stream, and ListInFlight()
// asks for the figures under the store's lock, while the call (which keeps the stream) is in
// flight. Thread-safe.
class RpczStreamView {
 public:
  virtual RpczStreamStats StreamStats(MonoTime now) const = 0;

 protected:
  ~RpczStreamView() = default;
};

// A call in flight, as copied out by RpczStore::ListInFlight().
struct RpczInFlightCall {
  std::string service;  // "rrpc.rtest.EchoService"
  std::string method;   // "Echo"
  std::string peer;     // "127.0.0.1:41234"
  int32_t call_id = 0;
  RpczCallState state = RpczCallState::kQueued;
  MonoDelta elapsed;  // Since arrival.
  // Offsets from arrival; negative when the call has not got there yet.
  MonoDelta started;
  MonoDelta responded;
  RpczTraceIds trace;
  bool is_stream = false;  // the call opened a stream: `stream` holds its figures
  RpczStreamStats stream;
};

struct RpczInFlightList {
  std::vector<RpczInFlightCall> calls;  // Longest elapsed first; at most the limit asked for.
  size_t total = 0;                     // Calls in flight, including those left out.
};

// A finished call kept as a sample. Offsets are microseconds since arrival; -1 when the call
// never got there (a call refused by a full queue never starts). Queue wait = started, handler
// time = responded - started, send time = done - responded.
struct RpczSample {
  std::string peer;
  int32_t call_id = 0;
  int64_t arrival_unix_us = 0;  // Wall clock, microseconds since the Unix epoch.
  int64_t started_us = -1;      // A worker took it.
  int64_t responded_us = -1;    // The response (or error) was serialized.
  int64_t done_us = -1;         // The response was written, or dropped.
  bool sent = false;            // False: the connection went away before the response was written.
  std::string error_code;       // "" on success, else e.g. "ERROR_TIMED_OUT".
  std::string error_message;
  RpczTraceIds trace;
};

// A finished call of a sampled trace (RpczStore::ListSpans): the server's span.
struct RpczSpan {
  std::string service;
  std::string method;
  RpczSample call;  // its timeline, outcome and trace ids
};

// The samples of one method, newest first.
struct RpczMethodSamples {
  std::string service;
  std::string method;
  std::vector<RpczSample> slow;    // Successful calls that took at least the slow threshold.
  std::vector<RpczSample> failed;  // Answered with an error, or whose response was not sent.
  uint64_t slow_seen = 0;          // Calls sampled as slow since start (ring overwrites).
  uint64_t failed_seen = 0;
};

// What the store needs to know about a call when it starts tracking it. The strings and the
// peer must stay valid until the entry is finished (InboundCall keeps them).
struct RpczCallInfo {
  const void* method_key = nullptr;  // Same pointer for every call of a method (RpcMethodInfo*).
  std::string_view service;
  std::string_view method;
  const Sockaddr* peer = nullptr;
  int32_t call_id = 0;
  MonoTime arrival;
  // Set by the call's owner when the caller sent a valid trace context (InboundCall::ParseFrom);
  // zeros otherwise.
  RpczTraceIds trace;
  // The stream the call opened (docs/streams.md), or nullptr.
  const RpczStreamView* stream = nullptr;
};

// The store's part of one call, embedded in it. Not copyable: the store links to it.
class RpczCallEntry {
 public:
  RpczCallEntry() = default;
  // Finishes (unsent) if still tracked, so a call can never dangle in a list. Inline (below),
  // like Finish(): most calls are finished already, and the check is all they pay.
  ~RpczCallEntry();
  RpczCallEntry(const RpczCallEntry&) = delete;
  RpczCallEntry& operator=(const RpczCallEntry&) = delete;

  // The thread that owns the call. Relaxed stores; cheap enough for every call.
  void MarkStarted(MonoTime t) { started_ns_.store(t.ToNanoseconds(), std::memory_order_relaxed); }
  // The call's response was serialized now; `error` is its error, or null for success. No-op
  // (not even a clock read) when the call is not tracked. Inline (below) for success.
  void MarkResponded(MonoTime t, const ErrorStatusPB* error);
  // The same with the time and error given: `error_code` is an ErrorStatusPB code, or -1 for
  // success. The message is copied only for errors.
  void MarkResponded(MonoTime t, int error_code, std::string_view error_message);
  // The thread that owns the call, once it is over: `sent` tells whether the response was
  // written. Unlinks the call and samples it if it was slow or failed. No-op if not tracked.
  void Finish(bool sent);
  // Finish(true) for a response its responder wrote whole right after MarkResponded(), on the
  // same thread: the response's time stands for the write's (one write() apart), which saves a
  // clock read per call. REQUIRES: MarkResponded() ran (or the entry is not tracked).
  void FinishSentAtResponse();

  bool tracked() const { return store_ != nullptr; }
  // What RpczStore::Track() will link, filled in place by the call's owner before it (no copy
  // from a caller's struct).
  // REQUIRES: not tracked.
  RpczCallInfo* mutable_info() { return &info_; }
  // The owner's thread.
  const RpczCallInfo& info() const { return info_; }

 private:
  friend class RpczStore;

  // MarkResponded() with an error: copies its code and message.
  void MarkFailed(MonoTime t, const ErrorStatusPB& error);

  // Set by RpczStore::Track() before the entry is linked, then read-only until Finish().
  RpczStore* store_ = nullptr;
  RpczCallEntry* prev_ = nullptr;  // Guarded by the stripe's mutex.
  RpczCallEntry* next_ = nullptr;  // Guarded by the stripe's mutex.
  size_t stripe_ = 0;
  RpczCallInfo info_;
  // 0 until reached; written by the owning thread, read by ListInFlight() under the stripe lock.
  std::atomic<int64_t> started_ns_{0};
  std::atomic<int64_t> responded_ns_{0};
  // Written by the responding thread and read by the finishing thread, which receives the call
  // through the reactor's queue (a happens-before edge); never read by page readers.
  int error_code_ = -1;
  std::string error_message_;
};

struct RpczStoreOptions {
  // Samples kept per method and kind (slow, failed).
  size_t samples_per_method = 10;
  // A successful call taking at least this long (arrival to response written) is sampled as
  // slow. Changeable later with set_slow_threshold().
  MonoDelta slow_threshold = MonoDelta::FromMilliseconds(100);
  // At most one sample per method and kind per this interval: bounds the cost of an error storm
  // (every call failing) to a relaxed atomic load per call. 0 samples every slow/failed call.
  MonoDelta min_sample_interval = MonoDelta::FromMilliseconds(1);
  // Distinct methods that can have samples; calls of further methods are tracked in flight but
  // not sampled. Fixed so that the method table never reallocates (it is read without locks).
  size_t max_methods = 1024;
  // Finished calls of sampled traces kept for ListSpans(), newest replacing oldest: one ring per
  // store, bounded. 0 keeps none.
  size_t trace_spans = 1024;
};

class RpczStore {
 public:
  explicit RpczStore(RpczStoreOptions options = {});
  ~RpczStore();
  RpczStore(const RpczStore&) = delete;
  RpczStore& operator=(const RpczStore&) = delete;

  // Tracks a call from now until entry->Finish(), on stripe `stripe_hint` modulo the number of
  // stripes (callers pass their reactor's index, so that reactors never share a mutex), with the
  // info set in entry->mutable_info(). REQUIRES: `entry` is not tracked.
  void Track(RpczCallEntry* entry, size_t stripe_hint);

  void set_slow_threshold(MonoDelta threshold);
  MonoDelta slow_threshold() const;

  // The calls in flight now, longest first, at most `limit` of them. Copies at most `limit`
  // calls per stripe, the oldest of each (a stripe holds its calls in the order they arrived).
  RpczInFlightList ListInFlight(size_t limit) const;
  // Every method with samples, sorted by service and method.
  std::vector<RpczMethodSamples> ListSamples() const;
  // The kept spans of the trace `trace_id_high`/`trace_id_low`, oldest first (see
  // RpczStoreOptions::trace_spans).
  std::vector<RpczSpan> ListSpans(uint64_t trace_id_high, uint64_t trace_id_low) const;
  // Samples not taken because their ring was busy (another sample being taken or read).
  uint64_t samples_dropped() const { return samples_dropped_.load(std::memory_order_relaxed); }

 private:
  friend class RpczCallEntry;  // Finish()
  struct Stripe;
  struct MethodSamples;
  struct SpanRing;

  // Stripes of the in-flight list. More than a typical server's reactors, so that each reactor
  // has its own; a cache line each, so that reactors do not share one.
  static constexpr size_t kNumStripes = 16;

  // Unlinks the entry; samples it when it failed or took longer than the threshold by `done`.
  void Finish(RpczCallEntry* entry, bool sent, MonoTime done);
  // The samples of `info.method_key`, created on first use; null when the table is full.
  MethodSamples* FindOrCreateMethod(const RpczCallInfo& info);
  void Sample(RpczCallEntry* entry, MonoTime done, bool sent, bool failed);
  // The entry's timeline and outcome as a sample (its error message moved out).
  static RpczSample MakeSample(RpczCallEntry* entry, MonoTime done, bool sent);
  // Keeps a finished call of a sampled trace in spans_.
  void RecordSpan(RpczCallEntry* entry, MonoTime done, bool sent);

  const RpczStoreOptions options_;
  std::atomic<int64_t> slow_threshold_ns_;
  std::unique_ptr<Stripe[]> stripes_;
  // Open addressing by method key; a slot is set once (CAS from null) and never cleared.
  std::unique_ptr<std::atomic<MethodSamples*>[]> methods_;
  size_t methods_capacity_ = 0;  // A power of two, at least twice max_methods.
  std::atomic<size_t> num_methods_{0};
  std::atomic<uint64_t> samples_dropped_{0};
  std::unique_ptr<SpanRing> spans_;
};

inline RpczCallEntry::~RpczCallEntry() {
  if (store_ != nullptr) store_->Finish(this, /*sent=*/false, MonoTime::Now());
}

inline void RpczCallEntry::MarkResponded(MonoTime t, const ErrorStatusPB* error) {
  if (store_ == nullptr) return;
  if (error != nullptr) return MarkFailed(t, *error);
  error_code_ = -1;
  responded_ns_.store(t.ToNanoseconds(), std::memory_order_relaxed);
}

inline void RpczCallEntry::Finish(bool sent) {
  if (store_ != nullptr) store_->Finish(this, sent, MonoTime::Now());
}

inline void RpczCallEntry::FinishSentAtResponse() {
  if (store_ == nullptr) return;
  store_->Finish(this, /*sent=*/true,
                 MonoTime::FromNanoseconds(responded_ns_.load(std::memory_order_relaxed)));
}

}  // namespace rrpc::rpc
