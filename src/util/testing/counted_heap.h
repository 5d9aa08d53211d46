// The heap a test binary holds, counted by its own operator new and delete: every C++ allocation
// of the process, by the usable size malloc gave it. Include it from exactly one .cc of a test
// binary (it defines the global operators there). Under a sanitizer, which replaces the allocator
// and pads every block, nothing is counted: RRPC_HEAP_COUNTED is 0 and tests skip.
//
//   const int64_t before = rrpc::LiveHeapBytes();
//   ... make what is measured ...
//   EXPECT_LT(rrpc::LiveHeapBytes() - before, kBound);
#pragma once

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace rrpc {
namespace counted_heap_internal {

inline std::atomic<int64_t> live_heap_bytes{0};

inline void* CountedNew(size_t n) {
  void* p = malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  live_heap_bytes.fetch_add(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}

inline void CountedDelete(void* p) {
  if (p == nullptr) return;
  live_heap_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  free(p);
}

}  // namespace counted_heap_internal

// Bytes the process holds through operator new now. Any thread.
inline int64_t LiveHeapBytes() { return counted_heap_internal::live_heap_bytes.load(); }

}  // namespace rrpc

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RRPC_HEAP_COUNTED 0
#else
#define RRPC_HEAP_COUNTED 1
void* operator new(size_t n) { return rrpc::counted_heap_internal::CountedNew(n); }
void* operator new[](size_t n) { return rrpc::counted_heap_internal::CountedNew(n); }
void operator delete(void* p) noexcept { rrpc::counted_heap_internal::CountedDelete(p); }
void operator delete[](void* p) noexcept { rrpc::counted_heap_internal::CountedDelete(p); }
void operator delete(void* p, size_t) noexcept { rrpc::counted_heap_internal::CountedDelete(p); }
void operator delete[](void* p, size_t) noexcept { rrpc::counted_heap_internal::CountedDelete(p); }
#endif
