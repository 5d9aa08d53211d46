#include "rpc/observe/rpcz_store.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <tuple>

#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

namespace {

// Error messages are kept for display only: long ones are cut.
constexpr size_t kMaxErrorMessageBytes = 512;

int64_t OffsetUs(MonoTime from, int64_t to_ns) {
  if (to_ns == 0) return -1;
  return (MonoTime::FromNanoseconds(to_ns) - from).ToMicroseconds();
}

MonoDelta OffsetOrNegative(MonoTime from, int64_t to_ns) {
  if (to_ns == 0) return MonoDelta::FromNanoseconds(-1);
  return MonoTime::FromNanoseconds(to_ns) - from;
}

size_t HashPointer(const void* p) {
  // Methods' infos are heap objects: the low bits carry no information.
  uint64_t x = reinterpret_cast<uintptr_t>(p);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<size_t>(x);
}

size_t NextPowerOfTwo(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

const char* RpczCallStateName(RpczCallState state) {
  switch (state) {
    case RpczCallState::kQueued:
      return "queued";
    case RpczCallState::kRunning:
      return "running";
    case RpczCallState::kSending:
      return "sending";
  }
  return "unknown";
}

struct alignas(64) RpczStore::Stripe {
  mutable Mutex mu;
  // Newest first: one reactor links its calls in the order they arrive, so the tail holds the
  // oldest, and a reader wanting the longest-running calls walks from there.
  RpczCallEntry* head RRPC_GUARDED_BY(mu) = nullptr;
  RpczCallEntry* tail RRPC_GUARDED_BY(mu) = nullptr;
  size_t size RRPC_GUARDED_BY(mu) = 0;
};

// One ring per kind; `next` is where the next sample goes.
struct RpczStore::MethodSamples {
  struct Ring {
    std::vector<RpczSample> samples;  // Grows up to samples_per_method, then wraps.
    size_t next = 0;
    uint64_t seen = 0;
    std::atomic<int64_t> last_sample_ns{0};  // Read without the lock by the rate limit.
  };

  MethodSamples(const void* k, std::string_view s, std::string_view m)
      : key(k), service(s), method(m) {}

  const void* const key;
  const std::string service;
  const std::string method;
  Mutex mu;
  Ring slow RRPC_GUARDED_BY(mu);  // samples, next and seen; last_sample_ns is read without mu
  Ring failed RRPC_GUARDED_BY(mu);
};

void RpczCallEntry::MarkResponded(MonoTime t, int error_code, std::string_view error_message) {
  if (store_ == nullptr) return;
  error_code_ = error_code;
  if (error_code >= 0) {
    error_message_.assign(error_message.substr(0, kMaxErrorMessageBytes));
  }
  responded_ns_.store(t.ToNanoseconds(), std::memory_order_relaxed);
}

void RpczCallEntry::MarkFailed(MonoTime t, const ErrorStatusPB& error) {
  MarkResponded(t, error.code(), error.message());
}

struct RpczStore::SpanRing {
  mutable Mutex mu;
  std::vector<RpczSpan> spans RRPC_GUARDED_BY(mu);  // at most trace_spans; next replaced first
  size_t next RRPC_GUARDED_BY(mu) = 0;
};

RpczStore::RpczStore(RpczStoreOptions options)
    : options_(std::move(options)),
      slow_threshold_ns_(options_.slow_threshold.ToNanoseconds()),
      stripes_(new Stripe[kNumStripes]),
      spans_(std::make_unique<SpanRing>()) {
  methods_capacity_ = NextPowerOfTwo(std::max<size_t>(options_.max_methods, 1) * 2);
  methods_.reset(new std::atomic<MethodSamples*>[methods_capacity_]);
  for (size_t i = 0; i < methods_capacity_; i++) methods_[i].store(nullptr);
}

RpczStore::~RpczStore() {
  // A call still tracked now was leaked by its owner: harmless unless it is destroyed later.
  for (size_t i = 0; i < kNumStripes; i++) {
    LOG_IF(WARNING, stripes_[i].head != nullptr)
        << "RpczStore destroyed while " << stripes_[i].size << " calls are tracked";
  }
  for (size_t i = 0; i < methods_capacity_; i++) delete methods_[i].load();
}

void RpczStore::set_slow_threshold(MonoDelta threshold) {
  slow_threshold_ns_.store(threshold.ToNanoseconds(), std::memory_order_relaxed);
}

MonoDelta RpczStore::slow_threshold() const {
  return MonoDelta::FromNanoseconds(slow_threshold_ns_.load(std::memory_order_relaxed));
}

void RpczStore::Track(RpczCallEntry* entry, size_t stripe_hint) {
  DCHECK(entry->store_ == nullptr) << "call tracked twice";
  entry->store_ = this;
  entry->stripe_ = stripe_hint % kNumStripes;
  Stripe& stripe = stripes_[entry->stripe_];
  MutexLock lock(stripe.mu);
  entry->prev_ = nullptr;
  entry->next_ = stripe.head;
  if (stripe.head != nullptr) {
    stripe.head->prev_ = entry;
  } else {
    stripe.tail = entry;
  }
  stripe.head = entry;
  stripe.size++;
}

void RpczStore::Finish(RpczCallEntry* entry, bool sent, MonoTime done) {
  {
    Stripe& stripe = stripes_[entry->stripe_];
    MutexLock lock(stripe.mu);
    if (entry->prev_ != nullptr) {
      entry->prev_->next_ = entry->next_;
    } else {
      stripe.head = entry->next_;
    }
    if (entry->next_ != nullptr) {
      entry->next_->prev_ = entry->prev_;
    } else {
      stripe.tail = entry->prev_;
    }
    entry->prev_ = entry->next_ = nullptr;
    stripe.size--;
  }
  const bool failed = !sent || entry->error_code_ >= 0;
  const bool slow = (done - entry->info_.arrival).ToNanoseconds() >=
                    slow_threshold_ns_.load(std::memory_order_relaxed);
  if (failed || slow) Sample(entry, done, sent, failed);
  if (entry->info_.trace.sampled() && entry->info_.trace.present()) RecordSpan(entry, done, sent);
  entry->store_ = nullptr;
}

RpczStore::MethodSamples* RpczStore::FindOrCreateMethod(const RpczCallInfo& info) {
  const size_t mask = methods_capacity_ - 1;
  size_t i = HashPointer(info.method_key) & mask;
  for (size_t probes = 0; probes < methods_capacity_; probes++, i = (i + 1) & mask) {
    MethodSamples* m = methods_[i].load(std::memory_order_acquire);
    if (m == nullptr) {
      // A new method: claim the slot (the table is at most half full, so probing stays short).
      // The load first keeps a full table from being a contended counter on the call path.
      if (num_methods_.load(std::memory_order_relaxed) >= options_.max_methods) return nullptr;
      if (num_methods_.fetch_add(1, std::memory_order_relaxed) >= options_.max_methods) {
        num_methods_.fetch_sub(1, std::memory_order_relaxed);
        return nullptr;
      }
      auto fresh = std::make_unique<MethodSamples>(info.method_key, info.service, info.method);
      if (methods_[i].compare_exchange_strong(m, fresh.get(), std::memory_order_acq_rel)) {
        return fresh.release();
      }
      // Another thread filled this slot first; `m` is what it put there.
      num_methods_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (m->key == info.method_key) return m;
  }
  return nullptr;
}

void RpczStore::Sample(RpczCallEntry* entry, MonoTime done, bool sent, bool failed) {
  MethodSamples* m = FindOrCreateMethod(entry->info_);
  if (m == nullptr) return;
  MethodSamples::Ring& ring = failed ? m->failed : m->slow;
  // The rate limit: one relaxed load in the common case of a storm.
  // With no interval, never skip: another thread's later `done` may already be stored, and the
  // negative difference would otherwise read as "too soon".
  const int64_t interval_ns = options_.min_sample_interval.ToNanoseconds();
  const int64_t last = ring.last_sample_ns.load(std::memory_order_relaxed);
  if (interval_ns > 0 && last != 0 && done.ToNanoseconds() - last < interval_ns) return;
  if (options_.samples_per_method == 0) return;

  // Build the sample before taking the lock, which is then held only to move it in.
  RpczSample sample = MakeSample(entry, done, sent);

  // A sample is worth less than the reactor's time: when another thread holds the rings, drop it.
  if (!m->mu.TryLock()) {
    samples_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ring.last_sample_ns.store(done.ToNanoseconds(), std::memory_order_relaxed);
  ring.seen++;
  if (ring.samples.size() < options_.samples_per_method) {
    ring.samples.push_back(std::move(sample));
    ring.next = ring.samples.size() % options_.samples_per_method;
  } else {
    ring.samples[ring.next] = std::move(sample);
    ring.next = (ring.next + 1) % options_.samples_per_method;
  }
  m->mu.Unlock();
}

RpczSample RpczStore::MakeSample(RpczCallEntry* entry, MonoTime done, bool sent) {
  const MonoTime arrival = entry->info_.arrival;
  RpczSample sample;
  sample.peer = entry->info_.peer != nullptr ? entry->info_.peer->ToString() : "";
  sample.call_id = entry->info_.call_id;
  const int64_t age_us = (done - arrival).ToMicroseconds();
  const int64_t now_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  sample.arrival_unix_us = now_unix_us - age_us;
  sample.started_us = OffsetUs(arrival, entry->started_ns_.load(std::memory_order_relaxed));
  sample.responded_us = OffsetUs(arrival, entry->responded_ns_.load(std::memory_order_relaxed));
  sample.done_us = age_us;
  sample.sent = sent;
  sample.trace = entry->info_.trace;
  if (entry->error_code_ >= 0) {
    const auto code = static_cast<ErrorStatusPB::RpcErrorCodePB>(entry->error_code_);
    sample.error_code = ErrorStatusPB::RpcErrorCodePB_IsValid(code)
                            ? ErrorStatusPB::RpcErrorCodePB_Name(code)
                            : std::to_string(entry->error_code_);
    sample.error_message = std::move(entry->error_message_);
  } else if (!sent) {
    sample.error_code = "NOT_SENT";
    sample.error_message = "the connection closed before the response was written";
  }
  return sample;
}

void RpczStore::RecordSpan(RpczCallEntry* entry, MonoTime done, bool sent) {
  if (options_.trace_spans == 0) return;
  RpczSpan span;
  span.service.assign(entry->info_.service);
  span.method.assign(entry->info_.method);
  // After Sample(), which may have moved the error message out: the span keeps the code.
  span.call = MakeSample(entry, done, sent);
  MutexLock lock(spans_->mu);
  if (spans_->spans.size() < options_.trace_spans) {
    spans_->spans.push_back(std::move(span));
    spans_->next = spans_->spans.size() % options_.trace_spans;
  } else {
    spans_->spans[spans_->next] = std::move(span);
    spans_->next = (spans_->next + 1) % options_.trace_spans;
  }
}

std::vector<RpczSpan> RpczStore::ListSpans(uint64_t trace_id_high, uint64_t trace_id_low) const {
  std::vector<RpczSpan> out;
  MutexLock lock(spans_->mu);
  const size_t n = spans_->spans.size();
  for (size_t i = 0; i < n; i++) {
    // Oldest first: from `next` on, when the ring is full.
    const RpczSpan& span = spans_->spans[(spans_->next + i) % n];
    if (span.call.trace.SameTrace(trace_id_high, trace_id_low)) out.push_back(span);
  }
  return out;
}

RpczInFlightList RpczStore::ListInFlight(size_t limit) const {
  struct Raw {
    RpczInFlightCall call;
    Sockaddr peer;
  };
  std::vector<Raw> raw;
  size_t total = 0;
  const MonoTime now = MonoTime::Now();
  for (size_t s = 0; s < kNumStripes; s++) {
    const Stripe& stripe = stripes_[s];
    MutexLock lock(stripe.mu);
    total += stripe.size;
    // Copies at most `limit` calls per stripe, oldest first: the reactor waits for this lock, so
    // the work under it is bounded however many calls are in flight.
    size_t copied = 0;
    for (const RpczCallEntry* e = stripe.tail; e != nullptr && copied < limit;
         e = e->prev_, copied++) {
      Raw r;
      const MonoTime arrival = e->info_.arrival;
      r.call.service.assign(e->info_.service);
      r.call.method.assign(e->info_.method);
      if (e->info_.peer != nullptr) r.peer = *e->info_.peer;
      r.call.call_id = e->info_.call_id;
      r.call.trace = e->info_.trace;
      const int64_t started = e->started_ns_.load(std::memory_order_relaxed);
      const int64_t responded = e->responded_ns_.load(std::memory_order_relaxed);
      r.call.state = responded != 0 ? RpczCallState::kSending
                     : started != 0 ? RpczCallState::kRunning
                                    : RpczCallState::kQueued;
      r.call.elapsed = now - arrival;
      r.call.started = OffsetOrNegative(arrival, started);
      r.call.responded = OffsetOrNegative(arrival, responded);
      if (e->info_.stream != nullptr) {
        r.call.is_stream = true;
        r.call.stream = e->info_.stream->StreamStats(now);
      }
      raw.push_back(std::move(r));
    }
  }
  std::sort(raw.begin(), raw.end(),
            [](const Raw& a, const Raw& b) { return a.call.elapsed > b.call.elapsed; });
  RpczInFlightList out;
  out.total = total;
  const size_t n = std::min(limit, raw.size());
  out.calls.reserve(n);
  for (size_t i = 0; i < n; i++) {
    raw[i].call.peer = raw[i].peer.ToString();
    out.calls.push_back(std::move(raw[i].call));
  }
  return out;
}

std::vector<RpczMethodSamples> RpczStore::ListSamples() const {
  // Newest first: the ring's slots from next-1 backwards.
  auto copy_ring = [](const MethodSamples::Ring& ring, std::vector<RpczSample>* out) {
    const size_t n = ring.samples.size();
    out->reserve(n);
    for (size_t i = 0; i < n; i++) {
      out->push_back(ring.samples[(ring.next + n - 1 - i) % n]);
    }
  };
  std::vector<RpczMethodSamples> out;
  for (size_t i = 0; i < methods_capacity_; i++) {
    MethodSamples* m = methods_[i].load(std::memory_order_acquire);
    if (m == nullptr) continue;
    RpczMethodSamples ms;
    ms.service = m->service;
    ms.method = m->method;
    {
      MutexLock lock(m->mu);
      copy_ring(m->slow, &ms.slow);
      copy_ring(m->failed, &ms.failed);
      ms.slow_seen = m->slow.seen;
      ms.failed_seen = m->failed.seen;
    }
    out.push_back(std::move(ms));
  }
  std::sort(out.begin(), out.end(), [](const RpczMethodSamples& a, const RpczMethodSamples& b) {
    return std::tie(a.service, a.method) < std::tie(b.service, b.method);
  });
  return out;
}

}  // namespace rrpc::rpc
