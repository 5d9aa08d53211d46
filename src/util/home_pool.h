// HomePool: memory for objects one thread makes and any thread frees, kept for reuse by the thread
// that made them. A reactor makes each InboundCall and a worker usually frees it (after writing
// the response itself): malloc's per-thread caches do not help there (the freeing thread's cache
// fills, the making thread's stays empty), so each call paid a malloc and a free that took the
// slow paths, about 330 instructions (build-support/echo-cost).
//
// Each thread that allocates has a home: a free list of its own (owner only, no atomics) and a
// list that any thread returns blocks to (a lock-free push; the owner takes the whole list at once
// with one exchange when its own list runs dry, so there is no ABA problem). A block carries its
// home in a header, so a free is one compare-and-swap, whichever thread frees it.
//
// Bounded: a home keeps at most kMaxKept free blocks; what comes back beyond that goes back to the
// heap when the owner takes the returned list. A thread that exits leaves its home for the next
// thread that allocates (homes are never destroyed: blocks may come back to them at any time).
//
// Thread-safety: Allocate() on any thread (it uses that thread's home); Free() on any thread.
//
//   void* p = HomePool::Allocate(sizeof(Foo));  // the same size on every call
//   ...
//   HomePool::Free(p);
#pragma once

#include <atomic>
#include <cstddef>

namespace rrpc {

class HomePool {
 public:
  // Free blocks a home keeps for reuse.
  static constexpr size_t kMaxKept = 256;

  // A block of `size` bytes (aligned like malloc's), from this thread's home when it has one
  // free, else from the heap. Meant for one object type: a home keeps blocks of the first size
  // asked of it, and a block of another size comes from (and goes back to) the heap.
  static void* Allocate(size_t size);
  // Any thread: returns `p` (from Allocate) to the home it came from.
  static void Free(void* p);

  // This thread's home's free blocks (kept and returned), for tests. Walks the returned list:
  // call it when no other thread frees concurrently.
  static size_t FreeBlocksOnThisThreadForTests();

 private:
  struct Home;
  struct alignas(16) Header {
    Home* home;
    Header* next;
  };
  struct Home {
    std::atomic<Header*> returned{nullptr};  // any thread pushes
    Header* kept = nullptr;                  // the owner's; kept_count blocks
    size_t kept_count = 0;
    size_t block_size = 0;  // the owner's; set on first use
  };
  static Home* ThisThreadHome();
  // The owner: moves the returned blocks to the kept list, freeing those beyond kMaxKept.
  static void TakeReturned(Home* home);
};

}  // namespace rrpc
