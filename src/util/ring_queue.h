// RingQueue<T>: a FIFO queue in one power-of-two array used as a ring; the array doubles when
// full and is never shrunk (clear() keeps it). It allocates nothing until the first push_back,
// so an owner that never queues anything (a server connection's client-side state) holds only
// the empty struct. For one thread's small queues of default-constructible, movable values, such
// as a client connection's call deadlines. Not thread-safe: its owner's thread only.
//
// Why not std::deque: libstdc++'s deque allocates its map and a node when constructed, empty or
// not, and keeps the node after it empties: every idle connection paid for it
// (docs/performance-history.md, "Idle connection memory").
//
//   RingQueue<CallDeadline> deadlines;
//   deadlines.push_back({deadline, call_id});
//   while (!deadlines.empty() && deadlines.front().deadline <= now) deadlines.pop_front();
#pragma once

#include <glog/logging.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace rrpc {

template <typename T>
class RingQueue {
 public:
  RingQueue() = default;  // Allocates nothing until the first push_back.
  RingQueue(const RingQueue&) = delete;
  RingQueue& operator=(const RingQueue&) = delete;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // Slots allocated (0 until the first push_back).
  size_t capacity() const { return slots_ == nullptr ? 0 : mask_ + 1; }

  // REQUIRES: !empty().
  T& front() {
    DCHECK(!empty());
    return slots_[head_];
  }
  T& back() {
    DCHECK(!empty());
    return slots_[(head_ + size_ - 1) & mask_];
  }

  void push_back(T value) {
    if (size_ == capacity()) Grow();
    slots_[(head_ + size_) & mask_] = std::move(value);
    size_++;
  }

  // REQUIRES: !empty(). The slot's value is reset to T() (so it holds no resources).
  void pop_front() {
    DCHECK(!empty());
    slots_[head_] = T();
    head_ = (head_ + 1) & mask_;
    size_--;
  }

  // Removes every value; keeps the array.
  void clear() {
    while (!empty()) pop_front();
    head_ = 0;
  }

 private:
  static constexpr uint32_t kInitialCapacity = 8;

  void Grow() {
    const size_t old_capacity = capacity();
    const size_t new_capacity = old_capacity == 0 ? kInitialCapacity : old_capacity * 2;
    std::unique_ptr<T[]> grown(new T[new_capacity]);
    for (size_t i = 0; i < size_; i++) grown[i] = std::move(slots_[(head_ + i) & mask_]);
    slots_ = std::move(grown);
    head_ = 0;
    mask_ = static_cast<uint32_t>(new_capacity - 1);
  }

  std::unique_ptr<T[]> slots_;
  uint32_t head_ = 0;  // index of the front value
  uint32_t mask_ = 0;  // capacity() - 1, once allocated
  size_t size_ = 0;
};

}  // namespace rrpc
