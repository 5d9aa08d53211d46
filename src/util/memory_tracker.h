// MemoryTracker: counts bytes a component holds against a limit, in a tree (a connection's
// tracker under its messenger's), so one peer's share and everybody's total are both bounded.
// It only counts: callers ask OverLimit() and stop taking more (a connection stops reading);
// nothing is refused inside Consume(). Thread-safe (atomics): a reactor consumes, a worker
// releases. A child must not outlive its parent.
//   MemoryTracker messenger("inbound", 1 << 30);
//   MemoryTracker conn("conn", 64 << 20, &messenger);
//   conn.Consume(n);  // counted in both
//   if (conn.OverLimit()) pause reading;
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace rrpc {

class MemoryTracker {
 public:
  // `limit` 0: no limit of its own (its ancestors' still apply).
  MemoryTracker(std::string name, int64_t limit, MemoryTracker* parent = nullptr)
      : name_(std::move(name)), limit_(limit), parent_(parent) {}
  // Releases what is still consumed from the ancestors.
  ~MemoryTracker();
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // Counts `bytes` here and in every ancestor.
  void Consume(int64_t bytes);
  void Release(int64_t bytes) { Consume(-bytes); }

  // This tracker or an ancestor holds more than its limit. Inline: asked on every read.
  bool OverLimit() const {
    for (const MemoryTracker* t = this; t != nullptr; t = t->parent_) {
      if (t->limit_ > 0 && t->consumption() > t->limit_) return true;
    }
    return false;
  }
  // Every tracker on the path holds at most `fraction` of its limit (a resume mark below the
  // limit keeps a paused reader from flapping).
  bool AllBelow(double fraction) const;
  // Bytes this tracker's and its ancestors' limits still allow (INT64_MAX when none has one;
  // never negative).
  int64_t Headroom() const;

  const std::string& name() const { return name_; }
  int64_t limit() const { return limit_; }
  MemoryTracker* parent() const { return parent_; }
  int64_t consumption() const { return consumption_.load(std::memory_order_relaxed); }
  // The highest consumption seen.
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  const std::string name_;
  const int64_t limit_;
  MemoryTracker* const parent_;
  std::atomic<int64_t> consumption_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace rrpc
