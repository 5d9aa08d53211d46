#include "util/memory_tracker.h"

#include <algorithm>
#include <cstdint>

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

int64_t MemoryTracker::Headroom() const {
  int64_t headroom = INT64_MAX;
  for (const MemoryTracker* t = this; t != nullptr; t = t->parent_) {
    if (t->limit_ > 0) headroom = std::min(headroom, t->limit_ - t->consumption());
  }
  return std::max<int64_t>(headroom, 0);
}

}  // namespace rrpc
