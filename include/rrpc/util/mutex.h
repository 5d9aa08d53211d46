// Mutex, MutexLock and CondVar: a lock and a condition variable with clang thread-safety
// annotations, so that GUARDED_BY / REQUIRES on the fields and functions they protect are checked
// by the compiler (util/thread_annotations.h).
//
// Why not std::mutex underneath: the call path takes about six locks per call, none of them
// contended in the common case, and glibc's pthread_mutex_lock/unlock spend work on what such a
// lock does not need (the mutex kind, lock elision, owner and user counts). Mutex is a futex word
// instead: taking it free is one compare-and-swap, releasing it one exchange, both inline; a thread
// that finds it taken sleeps on the word in the kernel (the classic three-state futex lock: free,
// taken, taken with sleepers), as a glibc mutex would. Not recursive, no priority inheritance, like
// std::mutex. Thread-safe. Under TSAN the lock reports itself as a mutex (lock order, races).
//
//   Mutex mu_;
//   std::deque<Task> tasks_ RRPC_GUARDED_BY(mu_);
//   CondVar ready_;
//
//   void Push(Task t) RRPC_EXCLUDES(mu_) {
//     MutexLock l(mu_);
//     tasks_.push_back(std::move(t));
//     ready_.NotifyOne();
//   }
//   Task Pop() RRPC_EXCLUDES(mu_) {
//     MutexLock l(mu_);
//     while (tasks_.empty()) ready_.Wait(mu_);
//     ...
//   }
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>

#include "rrpc/util/monotime.h"
#include "rrpc/util/thread_annotations.h"

#if defined(__SANITIZE_THREAD__)
#define RRPC_TSAN_MUTEX 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RRPC_TSAN_MUTEX 1
#endif
#endif
#ifdef RRPC_TSAN_MUTEX
#include <sanitizer/tsan_interface.h>
#endif

namespace rrpc {

class RRPC_CAPABILITY("mutex") Mutex {
 public:
  // Constant-initialized, as std::mutex: a static Mutex is usable before any constructor runs,
  // and nothing is announced at destruction (TSAN learns of the lock at its first use and
  // forgets it when its memory is freed, as for std::mutex, whose destructor does nothing:
  // announcing the destruction would report uses that std::mutex never showed TSAN).
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() RRPC_ACQUIRE() {
#ifdef RRPC_TSAN_MUTEX
    __tsan_mutex_pre_lock(this, 0);
#endif
    uint32_t expected = kFree;
    if (!state_.compare_exchange_strong(expected, kTaken, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      LockContended();
    }
#ifdef RRPC_TSAN_MUTEX
    __tsan_mutex_post_lock(this, 0, 0);
#endif
  }

  void Unlock() RRPC_RELEASE() {
#ifdef RRPC_TSAN_MUTEX
    __tsan_mutex_pre_unlock(this, 0);
#endif
    // The word is all a sleeper needs: WakeOne() uses its address only, so the mutex may be
    // destroyed by the next owner as soon as the exchange is done.
    if (state_.exchange(kFree, std::memory_order_release) == kTakenWithSleepers) WakeOne();
#ifdef RRPC_TSAN_MUTEX
    __tsan_mutex_post_unlock(this, 0);
#endif
  }

  bool TryLock() RRPC_TRY_ACQUIRE(true) {
#ifdef RRPC_TSAN_MUTEX
    __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
#endif
    uint32_t expected = kFree;
    const bool locked = state_.compare_exchange_strong(expected, kTaken, std::memory_order_acquire,
                                                       std::memory_order_relaxed);
#ifdef RRPC_TSAN_MUTEX
    __tsan_mutex_post_lock(
        this, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed,
        0);
#endif
    return locked;
  }

  // For code the analysis cannot follow (a lock taken in one function and released in another):
  // declares the mutex held. Checks nothing at run time.
  void AssertHeld() const RRPC_ASSERT_CAPABILITY(this) {}

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kTaken = 1;
  static constexpr uint32_t kTakenWithSleepers = 2;  // Unlock must wake one.

  void LockContended();  // mutex.cc: sleeps until the word is free, then takes it
  void WakeOne();

  std::atomic<uint32_t> state_{kFree};
};

// Holds a Mutex for its scope.
class RRPC_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) RRPC_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RRPC_RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable waited on with a Mutex held (the caller's MutexLock). Like every
// condition variable it may wake spuriously: wait in a loop on the condition. Off the call path
// (latches, tests): std::condition_variable_any over the Mutex.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex& mu) RRPC_REQUIRES(mu) {
    Lockable lockable{mu};
    cv_.wait(lockable);
  }

  // Waits until notified or `deadline` passed; returns false on timeout. MonoTime::Max() waits
  // forever (in slices of an hour, so the std::chrono arithmetic cannot overflow).
  bool WaitUntil(Mutex& mu, MonoTime deadline) RRPC_REQUIRES(mu) {
    const MonoDelta remaining = deadline - MonoTime::Now();
    if (remaining.ToNanoseconds() <= 0) return false;
    const MonoDelta slice = std::min(remaining, MonoDelta::FromSeconds(3600));
    Lockable lockable{mu};
    cv_.wait_for(lockable, std::chrono::nanoseconds(slice.ToNanoseconds()));
    return MonoTime::Now() < deadline;
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  // What condition_variable_any releases while it sleeps and takes back before it returns: the
  // caller's Mutex, held on entry and on exit, as the REQUIRES above say.
  struct Lockable {
    Mutex& mu;
    void lock() RRPC_NO_THREAD_SAFETY_ANALYSIS { mu.Lock(); }
    void unlock() RRPC_NO_THREAD_SAFETY_ANALYSIS { mu.Unlock(); }
  };
  std::condition_variable_any cv_;
};

}  // namespace rrpc
