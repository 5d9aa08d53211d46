// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang thread-safety
// annotations, so that GUARDED_BY / REQUIRES on the fields and functions they protect are checked
// by the compiler (util/thread_annotations.h). They cost what the std types cost: every method is
// an inline forward.
//
//   Mutex mu_;
//   std::deque<Task> tasks_ GUARDED_BY(mu_);
//   CondVar ready_;
//
//   void Push(Task t) EXCLUDES(mu_) {
//     MutexLock l(mu_);
//     tasks_.push_back(std::move(t));
//     ready_.NotifyOne();
//   }
//   Task Pop() EXCLUDES(mu_) {
//     MutexLock l(mu_);
//     while (tasks_.empty()) ready_.Wait(mu_);
//     ...
//   }
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "util/monotime.h"
#include "util/thread_annotations.h"

namespace rrpc {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // For code the analysis cannot follow (a lock taken in one function and released in another):
  // declares the mutex held. Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable waited on with a Mutex held (the caller's MutexLock). Like every
// condition variable it may wake spuriously: wait in a loop on the condition.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // The caller's MutexLock still owns the mutex.
  }

  // Waits until notified or `deadline` passed; returns false on timeout. MonoTime::Max() waits
  // forever (in slices of an hour, so the std::chrono arithmetic cannot overflow).
  bool WaitUntil(Mutex& mu, MonoTime deadline) REQUIRES(mu) {
    const MonoDelta remaining = deadline - MonoTime::Now();
    if (remaining.ToNanoseconds() <= 0) return false;
    const MonoDelta slice = std::min(remaining, MonoDelta::FromSeconds(3600));
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait_for(lock, std::chrono::nanoseconds(slice.ToNanoseconds()));
    lock.release();
    return MonoTime::Now() < deadline;
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace rrpc
