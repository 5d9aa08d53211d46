// BlockingQueue<T>: a bounded FIFO that many producer and many consumer threads share, e.g. to
// hand work from a reactor to a helper thread. Thread-safe: every method may be called from any
// thread. Producers block (Put) or fail (TryPut) while it is full; consumers block while it is
// empty. Shutdown() stops producers at once and wakes everybody; consumers still drain what was
// queued before, then learn of the shutdown.
//
//   BlockingQueue<std::unique_ptr<Task>> q(128);
//   producer: if (q.TryPut(std::move(task)) != QueueStatus::kOk) { ... task still ours ... }
//   consumer: std::unique_ptr<Task> t; while (q.BlockingGet(&t)) t->Run();
#pragma once

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

#include "util/monotime.h"

namespace rrpc {

enum class QueueStatus {
  kOk,
  kFull,      // TryPut: no room.
  kShutdown,  // Put/TryPut after Shutdown(); Get once shut down and drained.
  kTimedOut,  // GetWithTimeout: nothing arrived in time.
};

inline const char* QueueStatusToString(QueueStatus s) {
  switch (s) {
    case QueueStatus::kOk:
      return "OK";
    case QueueStatus::kFull:
      return "full";
    case QueueStatus::kShutdown:
      return "shut down";
    case QueueStatus::kTimedOut:
      return "timed out";
  }
  return "unknown";
}

template <typename T>
class BlockingQueue {
 public:
  explicit BlockingQueue(size_t max_size) : max_size_(max_size) { CHECK_GT(max_size, 0u); }
  BlockingQueue(const BlockingQueue&) = delete;
  BlockingQueue& operator=(const BlockingQueue&) = delete;

  // Appends `item`, waiting while the queue is full. Returns kOk, or kShutdown if the queue is
  // (or becomes, while waiting) shut down. `item` is moved from only on kOk.
  template <typename U>
  QueueStatus Put(U&& item) {
    {
      std::unique_lock<std::mutex> l(mu_);
      not_full_.wait(l, [this] { return shutdown_ || queue_.size() < max_size_; });
      if (shutdown_) return QueueStatus::kShutdown;
      queue_.emplace_back(std::forward<U>(item));
    }
    not_empty_.notify_one();
    return QueueStatus::kOk;
  }

  // Appends `item` if there is room: kOk, kFull or kShutdown. `item` is moved from only on kOk.
  template <typename U>
  QueueStatus TryPut(U&& item) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (shutdown_) return QueueStatus::kShutdown;
      if (queue_.size() >= max_size_) return QueueStatus::kFull;
      queue_.emplace_back(std::forward<U>(item));
    }
    not_empty_.notify_one();
    return QueueStatus::kOk;
  }

  // Takes the oldest item into *out, waiting while the queue is empty. Returns false (and leaves
  // *out alone) once the queue is shut down and empty.
  bool BlockingGet(T* out) { return GetUntil(out, MonoTime::Max()) == QueueStatus::kOk; }

  // Like BlockingGet, but gives up after `timeout`: kOk, kTimedOut or kShutdown.
  QueueStatus GetWithTimeout(T* out, MonoDelta timeout) {
    return GetUntil(out, MonoTime::Now() + timeout);
  }

  // Takes the oldest item if there is one: kOk, kTimedOut (empty, not waiting) or kShutdown.
  QueueStatus TryGet(T* out) { return GetUntil(out, MonoTime()); }

  // Refuses further Puts, wakes every blocked producer (they get kShutdown) and consumer (they
  // drain what is left, then get kShutdown/false). Idempotent.
  void Shutdown() {
    {
      std::lock_guard<std::mutex> l(mu_);
      shutdown_ = true;
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  size_t size() const {
    std::lock_guard<std::mutex> l(mu_);
    return queue_.size();
  }
  size_t max_size() const { return max_size_; }
  bool is_shut_down() const {
    std::lock_guard<std::mutex> l(mu_);
    return shutdown_;
  }

 private:
  QueueStatus GetUntil(T* out, MonoTime deadline) {
    {
      std::unique_lock<std::mutex> l(mu_);
      while (queue_.empty()) {
        if (shutdown_) return QueueStatus::kShutdown;
        if (deadline.IsMax()) {
          not_empty_.wait(l);
          continue;
        }
        const MonoDelta remaining = deadline - MonoTime::Now();
        if (remaining.ToNanoseconds() <= 0) return QueueStatus::kTimedOut;
        // Slices of at most an hour keep long timeouts from overflowing std::chrono arithmetic.
        const MonoDelta slice = std::min(remaining, MonoDelta::FromSeconds(3600));
        not_empty_.wait_for(l, std::chrono::nanoseconds(slice.ToNanoseconds()));
      }
      *out = std::move(queue_.front());
      queue_.pop_front();
    }
    not_full_.notify_one();
    return QueueStatus::kOk;
  }

  const size_t max_size_;
  mutable std::mutex mu_;
  std::condition_variable not_empty_;  // Consumers wait here.
  std::condition_variable not_full_;   // Producers wait here.
  std::deque<T> queue_;                // Guarded by mu_.
  bool shutdown_ = false;              // Guarded by mu_.
};

}  // namespace rrpc
