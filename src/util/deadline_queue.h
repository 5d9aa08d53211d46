// DeadlineQueue<T, DeadlineFn>: a bounded queue of T* ordered earliest-deadline-first, feeding a
// pool of worker threads; the heart of the RPC service queue (docs/architecture.md).
// Thread-safe: Put from any thread (reactors), BlockingGet from worker threads, Shutdown from the
// owner. The queue never owns the items: whoever gets one back (a worker from BlockingGet, the
// caller of Put as *evicted, the caller of Shutdown) answers it.
//
// Why this shape:
//  - When the queue is full, the item with exactly the latest deadline is the one to refuse: it
//    has the most time to retry elsewhere. A min-max heap finds and removes both the earliest
//    (next to run) and the latest (next to evict) in O(log n), without allocating after
//    construction.
//  - Idle workers wait on a LIFO stack, each on its own futex word, so Put wakes exactly one
//    thread: the most recently idle one, whose caches are still warm. With a waiting worker an
//    item goes straight to it without touching the heap.
//  - An idle worker may first poll its word for a while (`idle_spin`) before it sleeps: a hand-off
//    it sees while polling costs neither side a syscall or a context switch. One worker polls at
//    a time, and polling backs off while it keeps finding nothing (docs/architecture.md).
//  - Items come in two lanes, foreground and background, each a heap bounded by `max_size` (a
//    flood in one lane never evicts the other's items). While foreground items wait, background
//    items are handed out only while fewer than `background_cap` of them run (the owner reports
//    each one's end with BackgroundDone()); with no foreground item waiting, background gets
//    every worker. So neither lane starves the other.
//
//   struct CallDeadline {
//     MonoTime operator()(const InboundCall* c) const { return c->deadline(); }
//   };
//   DeadlineQueue<InboundCall, CallDeadline> queue(options.service_queue_length);
//   reactor:  InboundCall* evicted;
//             switch (queue.Put(call, &evicted)) { case kRejected: RespondTooBusy(call); ... }
//             if (evicted) RespondTooBusy(evicted);
//   worker:   while (InboundCall* c = queue.BlockingGet()) Handle(c);
//   shutdown: for (InboundCall* c : queue.Shutdown()) RespondShuttingDown(c);
#pragma once

#include <glog/logging.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "util/spin_wait.h"

namespace rrpc {

namespace deadline_queue_internal {

// A binary heap whose even levels (root = level 0) are ordered by `Less` and odd levels by its
// reverse: the root is the minimum and one of its children the maximum. Not thread-safe; the
// owner locks. Never allocates once reserve()d for its largest size.
template <typename E, typename Less>
class MinMaxHeap {
 public:
  void reserve(size_t n) { v_.reserve(n); }
  size_t size() const { return v_.size(); }
  bool empty() const { return v_.empty(); }

  // REQUIRES: !empty().
  const E& min() const { return v_[0]; }
  const E& max() const { return v_[MaxIndex()]; }

  void push(E e) {
    v_.push_back(std::move(e));
    BubbleUp(v_.size() - 1);
  }
  // REQUIRES: !empty().
  E pop_min() { return RemoveAt(0); }
  E pop_max() { return RemoveAt(MaxIndex()); }

  // Removes and returns every element, in no particular order.
  std::vector<E> TakeAll() {
    std::vector<E> out(std::make_move_iterator(v_.begin()), std::make_move_iterator(v_.end()));
    v_.clear();
    return out;
  }

  // For tests: whether every element respects the ordering of all its ancestors.
  bool IsValid() const {
    for (size_t i = 1; i < v_.size(); i++) {
      for (size_t a = Parent(i);; a = Parent(a)) {
        if (IsMaxLevel(a) ? less_(v_[a], v_[i]) : less_(v_[i], v_[a])) return false;
        if (a == 0) break;
      }
    }
    return true;
  }

 private:
  static size_t Parent(size_t i) { return (i - 1) / 2; }
  static bool IsMaxLevel(size_t i) {
    // Level = floor(log2(i + 1)); odd levels hold maxima.
    return ((63 - __builtin_clzll(static_cast<unsigned long long>(i) + 1)) & 1) != 0;
  }

  // Whether `a` belongs nearer the root than `b` on a min level (kMax false) or max level.
  template <bool kMax>
  bool Before(const E& a, const E& b) const {
    return kMax ? less_(b, a) : less_(a, b);
  }

  size_t MaxIndex() const {
    if (v_.size() <= 2) return v_.size() - 1;
    return less_(v_[1], v_[2]) ? 2 : 1;
  }

  E RemoveAt(size_t i) {
    E out = std::move(v_[i]);
    const size_t last = v_.size() - 1;
    if (i != last) {
      v_[i] = std::move(v_[last]);
      v_.pop_back();
      // Only the root or one of its children is ever removed: their subtrees hold everything
      // that could be out of order, so trickling down suffices.
      if (IsMaxLevel(i)) {
        TrickleDown<true>(i);
      } else {
        TrickleDown<false>(i);
      }
    } else {
      v_.pop_back();
    }
    return out;
  }

  template <bool kMax>
  void TrickleDown(size_t i) {
    const size_t n = v_.size();
    while (true) {
      const size_t first_child = 2 * i + 1;
      if (first_child >= n) return;
      // The best of the (up to) 2 children and 4 grandchildren.
      size_t best = first_child;
      if (first_child + 1 < n && Before<kMax>(v_[first_child + 1], v_[best]))
        best = first_child + 1;
      const size_t first_grandchild = 2 * first_child + 1;
      for (size_t g = first_grandchild; g < first_grandchild + 4 && g < n; g++) {
        if (Before<kMax>(v_[g], v_[best])) best = g;
      }
      if (!Before<kMax>(v_[best], v_[i])) return;
      std::swap(v_[best], v_[i]);
      if (best < first_grandchild) return;  // A child has no descendants left to fix here.
      // The element moved down may now be out of order with its new parent, which sits on a
      // level of the other kind.
      const size_t p = Parent(best);
      if (Before<!kMax>(v_[best], v_[p])) std::swap(v_[best], v_[p]);
      i = best;
    }
  }

  void BubbleUp(size_t i) {
    if (i == 0) return;
    const size_t p = Parent(i);
    if (IsMaxLevel(i)) {
      if (less_(v_[i], v_[p])) {
        std::swap(v_[i], v_[p]);
        BubbleUpGrandparents<false>(p);
      } else {
        BubbleUpGrandparents<true>(i);
      }
    } else {
      if (less_(v_[p], v_[i])) {
        std::swap(v_[i], v_[p]);
        BubbleUpGrandparents<true>(p);
      } else {
        BubbleUpGrandparents<false>(i);
      }
    }
  }

  template <bool kMax>
  void BubbleUpGrandparents(size_t i) {
    while (i >= 3) {
      const size_t gp = Parent(Parent(i));
      if (!Before<kMax>(v_[i], v_[gp])) return;
      std::swap(v_[i], v_[gp]);
      i = gp;
    }
  }

  std::vector<E> v_;
  Less less_;
};

// One idle worker's wake-up slot, on that worker's stack. The waker stores the result and flips
// `state_` after releasing the queue mutex; only a waiter that went to sleep costs it a futex
// wake. A wake that lands after the waiter returned is harmless: FUTEX_WAKE only uses the
// address as a key, and every futex wait here re-checks its word.
struct Waiter {
  // Polls for a hand-off for up to `spin` (zero: not at all; see util/spin_wait.h for why), then
  // sleeps on the futex. Returns whether the hand-off came while polling.
  bool Wait(MonoDelta spin) {
    SpinUntil([this] { return state_.load(std::memory_order_acquire) != kWaiting; }, spin);
    uint32_t expected = kWaiting;
    if (!state_.compare_exchange_strong(expected, kSleeping, std::memory_order_acq_rel)) {
      return true;  // woken while polling
    }
    while (state_.load(std::memory_order_acquire) == kSleeping) {
      syscall(SYS_futex, FutexWord(), FUTEX_WAIT_PRIVATE, kSleeping, nullptr, nullptr, 0);
    }
    return false;
  }
  // REQUIRES: the waiter is off the stack (popped under the queue mutex), so no one else wakes
  // it. After this call the Waiter may already be gone.
  void Wake() {
    if (state_.exchange(kWoken, std::memory_order_acq_rel) == kSleeping) {
      syscall(SYS_futex, FutexWord(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }

  void* item = nullptr;    // Set by the waker before Wake(); nullptr means shut down.
  Waiter* next = nullptr;  // The next waiter down the stack. Guarded by the queue mutex.

 private:
  static constexpr uint32_t kWaiting = 0;   // on the stack, polling
  static constexpr uint32_t kSleeping = 1;  // on the stack, in (or entering) FUTEX_WAIT
  static constexpr uint32_t kWoken = 2;     // `item` is set
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                    std::atomic<uint32_t>::is_always_lock_free,
                "the futex syscall needs a plain 32-bit word");
  uint32_t* FutexWord() { return reinterpret_cast<uint32_t*>(&state_); }

  std::atomic<uint32_t> state_{kWaiting};
};

}  // namespace deadline_queue_internal

template <typename T, typename DeadlineFn>  // DeadlineFn: MonoTime operator()(const T*) const
class DeadlineQueue {
 public:
  enum class PutResult { kHandedOff, kQueued, kQueuedEvictedOther, kRejected, kShutdown };
  enum Lane { kForeground = 0, kBackground = 1 };

  // `max_size` bounds the queued items (hand-offs to waiting workers don't count); 0 means items
  // are only ever handed straight to idle workers.
  // `idle_spin`: how long a worker that finds nothing polls for a hand-off before it sleeps
  // (zero: never polls). At most one worker polls at a time, and polling backs off while it
  // keeps coming up empty (PollPolicy, util/spin_wait.h).
  // `background_cap`: background items running at most while foreground items wait (>= 1).
  explicit DeadlineQueue(size_t max_size, MonoDelta idle_spin = MonoDelta(), DeadlineFn fn = {},
                         size_t background_cap = 1)
      : max_size_(max_size),
        idle_spin_(idle_spin),
        deadline_fn_(std::move(fn)),
        background_cap_(background_cap < 1 ? 1 : background_cap) {
    heap_.reserve(max_size);
    background_heap_.reserve(max_size);
  }
  // REQUIRES: no worker waits (Shutdown() called and the workers gone) and no item is queued
  // (the queue does not own them: answer Shutdown()'s leftovers).
  ~DeadlineQueue() {
    DCHECK(waiters_ == nullptr) << "DeadlineQueue destroyed under waiting workers";
    DCHECK(heap_.empty() && background_heap_.empty()) << "DeadlineQueue destroyed holding items";
  }
  DeadlineQueue(const DeadlineQueue&) = delete;
  DeadlineQueue& operator=(const DeadlineQueue&) = delete;

  // Any thread. Offers `item` (deadline read once, through DeadlineFn):
  //  kHandedOff: a worker waited in BlockingGet; the most recently idle one got `item`.
  //  kQueued: queued for the next free worker.
  //  kQueuedEvictedOther: the queue was full and `item` was due before the latest queued item;
  //    that item (the latest-deadline one, the most recently queued among equal deadlines) is
  //    out, returned in *evicted, and `item` is queued. The caller answers *evicted.
  //  kRejected: full, and `item`'s deadline is at or after every queued one; not taken.
  //  kShutdown: Shutdown() was called; not taken.
  // *evicted is set to nullptr unless the result is kQueuedEvictedOther. Eviction stays within
  // `lane`; a background item handed off counts as running until BackgroundDone().
  PutResult Put(T* item, T** evicted, Lane lane = kForeground) RRPC_EXCLUDES(mu_) {
    DCHECK(item != nullptr);
    DCHECK(evicted != nullptr);
    *evicted = nullptr;
    const MonoTime deadline = deadline_fn_(static_cast<const T*>(item));
    Waiter* waiter;
    {
      MutexLock l(mu_);
      if (shutdown_) return PutResult::kShutdown;
      waiter = waiters_;
      if (waiter == nullptr) {
        return QueueLocked(lane == kForeground ? heap_ : background_heap_,
                           Entry{deadline, next_seq_++, item}, evicted);
      }
      if (lane == kBackground) background_running_++;
      waiters_ = waiter->next;
      num_waiters_--;
      waiter->item = item;
    }
    waiter->Wake();
    return PutResult::kHandedOff;
  }

  // How one BlockingGet waited, for the caller's metrics.
  struct WaitReport {
    bool polled = false;    // it found nothing and polled before sleeping
    bool poll_hit = false;  // the item came while it polled: no sleep, no wake
  };

  // Worker threads. Returns the queued item with the earliest deadline (the first queued among
  // equal deadlines) of the lane whose turn it is (see above), waiting while there is none;
  // nullptr once shut down. `report`, if given, says how it waited (left as is when it did not).
  // Always inlined: its caller is a worker's loop, and a call per item (registers saved, the
  // report through memory) costs about as much as the queue's own work on a hand-off.
  [[gnu::always_inline]] T* BlockingGet(WaitReport* report = nullptr) RRPC_EXCLUDES(mu_) {
    Waiter self;
    bool poll;
    {
      MutexLock l(mu_);
      if (!background_heap_.empty() && (heap_.empty() || background_running_ < background_cap_)) {
        background_running_++;
        return background_heap_.pop_min().item;
      }
      if (!heap_.empty()) return heap_.pop_min().item;
      if (shutdown_) return nullptr;
      self.next = waiters_;
      waiters_ = &self;
      num_waiters_++;
      poll = idle_spin_ > MonoDelta() && poll_policy_.BeginPoll();
    }
    const bool handed_off_while_polling = self.Wait(poll ? idle_spin_ : MonoDelta());
    if (poll) {
      MutexLock l(mu_);
      poll_policy_.EndPoll(handed_off_while_polling);
    }
    if (report != nullptr) {
      report->polled = poll;
      report->poll_hit = poll && handed_off_while_polling;
    }
    return static_cast<T*>(self.item);
  }

  // Any thread: a background item got from this queue (BlockingGet or a hand-off) has finished.
  void BackgroundDone() RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    DCHECK_GT(background_running_, 0u);
    background_running_--;
  }

  // Any thread; later calls find nothing to return. Refuses further Puts, wakes every waiting
  // worker (their BlockingGet returns nullptr) and returns the items still queued, earliest
  // deadline first, for the caller to answer.
  std::vector<T*> Shutdown() RRPC_EXCLUDES(mu_) {
    std::vector<Entry> left;
    Waiter* waiters;
    {
      MutexLock l(mu_);
      shutdown_ = true;
      waiters = waiters_;
      waiters_ = nullptr;
      num_waiters_ = 0;
      left.reserve(heap_.size() + background_heap_.size());
      while (!heap_.empty()) left.push_back(heap_.pop_min());
      while (!background_heap_.empty()) left.push_back(background_heap_.pop_min());
    }
    while (waiters != nullptr) {
      // Read `next` first: once woken, the waiter's stack frame may vanish.
      Waiter* next = waiters->next;
      waiters->item = nullptr;
      waiters->Wake();
      waiters = next;
    }
    std::vector<T*> out;
    out.reserve(left.size());
    for (const Entry& e : left) out.push_back(e.item);
    return out;
  }

  // Queued items, both lanes (not counting ones handed straight to workers).
  size_t size() const RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return heap_.size() + background_heap_.size();
  }
  size_t size(Lane lane) const RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return lane == kForeground ? heap_.size() : background_heap_.size();
  }
  // Background items handed out and not yet reported done.
  size_t background_running() const RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return background_running_;
  }
  size_t background_cap() const { return background_cap_; }
  size_t max_size() const { return max_size_; }
  // Workers blocked in BlockingGet right now (for tests and metrics).
  size_t waiting_workers() const RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return num_waiters_;
  }

 private:
  using Waiter = deadline_queue_internal::Waiter;

  struct Entry {
    MonoTime deadline;  // Cached: the heap compares often, DeadlineFn is called once per item.
    uint64_t seq;       // Arrival order; breaks deadline ties (FIFO) and makes the order total.
    T* item;
  };
  struct EntryLess {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.deadline < b.deadline || (a.deadline == b.deadline && a.seq < b.seq);
    }
  };

  using Heap = deadline_queue_internal::MinMaxHeap<Entry, EntryLess>;

  // REQUIRES: no waiting worker; `heap` is one of this queue's lanes.
  PutResult QueueLocked(Heap& heap, Entry e, T** evicted) RRPC_REQUIRES(mu_) {
    if (heap.size() < max_size_) {
      heap.push(e);
      return PutResult::kQueued;
    }
    if (heap.empty() || e.deadline >= heap.max().deadline) return PutResult::kRejected;
    *evicted = heap.pop_max().item;
    heap.push(e);
    return PutResult::kQueuedEvictedOther;
  }

  const size_t max_size_;
  const MonoDelta idle_spin_;
  const DeadlineFn deadline_fn_;
  const size_t background_cap_;

  mutable Mutex mu_;
  Heap heap_ RRPC_GUARDED_BY(mu_);  // the foreground lane
  Heap background_heap_ RRPC_GUARDED_BY(mu_);
  size_t background_running_ RRPC_GUARDED_BY(mu_) = 0;
  Waiter* waiters_ RRPC_GUARDED_BY(mu_) = nullptr;  // Top of the idle-worker stack.
  size_t num_waiters_ RRPC_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ RRPC_GUARDED_BY(mu_) = 0;
  bool shutdown_ RRPC_GUARDED_BY(mu_) = false;
  PollPolicy poll_policy_ RRPC_GUARDED_BY(mu_);  // One poller at a time.
};

}  // namespace rrpc
