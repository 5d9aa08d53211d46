// StashAllocator<T>: a standard allocator whose single-object allocations come from a per-thread
// stash of freed ones (util/thread_stash.h), for node-based containers owned by one thread (a
// reactor's map of calls awaiting their response): inserting and erasing a node then costs no
// malloc/free pair. Arrays (a hash map's buckets) come from operator new as usual. Stateless:
// any two compare equal, and memory freed on another thread simply lands in that thread's stash
// or goes back to the heap.
#pragma once

#include <cstddef>
#include <new>

#include "rrpc/util/thread_stash.h"

namespace rrpc {

namespace stash_allocator_internal {
// One stash per object size (a distinct release function makes a distinct stash): nodes of the
// same size share it.
template <size_t kSize>
void FreeNode(void* p) {
  ::operator delete(p);
}
template <size_t kSize>
using NodeStash = ThreadStash<void*, 32, FreeNode<kSize>>;
}  // namespace stash_allocator_internal

template <typename T>
class StashAllocator {
 public:
  using value_type = T;

  StashAllocator() = default;
  template <typename U>
  StashAllocator(const StashAllocator<U>&) {}  // NOLINT(runtime/explicit)

  T* allocate(size_t n) {
    void* p;
    if (n == 1 && Stash::Pop(&p)) return static_cast<T*>(p);
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1 && Stash::Push(p)) return;
    ::operator delete(p);
  }

  template <typename U>
  bool operator==(const StashAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const StashAllocator<U>&) const {
    return false;
  }

 private:
  static_assert(alignof(T) <= alignof(std::max_align_t), "over-aligned types are not pooled");
  using Stash = stash_allocator_internal::NodeStash<sizeof(T)>;
};

}  // namespace rrpc
