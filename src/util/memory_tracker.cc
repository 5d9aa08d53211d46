#include "util/memory_tracker.h"

namespace rrpc {

MemoryTracker::~MemoryTracker() {
  const int64_t left = consumption();
  if (left != 0 && parent_ != nullptr) parent_->Consume(-left);
}

void MemoryTracker::Consume(int64_t bytes) {
  for (MemoryTracker* t = this; t != nullptr; t = t->parent_) {
    const int64_t now = t->consumption_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (bytes > 0) {
      int64_t peak = t->peak_.load(std::memory_order_relaxed);
      while (now > peak && !t->peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
      }
    }
  }
}

bool MemoryTracker::AllBelow(double fraction) const {
  for (const MemoryTracker* t = this; t != nullptr; t = t->parent_) {
    if (t->limit_ > 0 && static_cast<double>(t->consumption()) > fraction * t->limit_) {
      return false;
    }
  }
  return true;
}

}  // namespace rrpc
