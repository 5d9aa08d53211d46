// HomePool<Tag, kMaxKept>: memory for objects one thread makes and any thread frees, kept for
// reuse by the thread that made them. A reactor makes each InboundCall and each read block, and a
// worker usually frees them (after writing the response itself): malloc's per-thread caches do
// not help there (the freeing thread's cache fills, the making thread's stays empty), so each
// call would pay mallocs and frees that take the slow paths.
//
// Each thread that allocates has a home: a free list of its own (owner only, no atomics) and a
// list that any thread returns blocks to (a lock-free push; the owner takes the whole list at once
// with one exchange when its own list runs dry, so there is no ABA problem). A block carries its
// home in a header, so a free is one compare-and-swap, whichever thread frees it.
//
// Bounded: a home keeps at most kMaxKept free blocks; what comes back beyond that goes back to the
// heap when the owner takes the returned list. A thread that exits leaves its home for the next
// thread that allocates from the same pool (homes are never destroyed: blocks may come back to
// them at any time). Each Tag is a separate pool, for one object size.
//
// Thread-safety: Allocate() on any thread (it uses that thread's home); Free() on any thread.
//
//   struct FooPoolTag {};
//   using FooPool = HomePool<FooPoolTag, 64>;
//   void* p = FooPool::Allocate(sizeof(Foo));  // the same size on every call
//   ...
//   FooPool::Free(p);
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "rrpc/util/mutex.h"
#include "rrpc/util/thread_annotations.h"

namespace rrpc {

namespace home_pool_internal {

struct Home;
struct alignas(16) Header {  // before each block; 16 bytes keep the block aligned like malloc's
  Home* home;                // nullptr: the heap's (freed with free())
  Header* next;
};
struct Home {
  std::atomic<Header*> returned{nullptr};  // any thread pushes
  Header* kept = nullptr;                  // the owner's; kept_count blocks
  size_t kept_count = 0;
  size_t block_size = 0;  // the owner's; set on first use
};
// The homes of one pool whose threads exited, for the next thread to adopt.
struct Orphans {
  Mutex mu;
  std::vector<Home*> homes RRPC_GUARDED_BY(mu);
};

Home* AdoptOrCreate(Orphans* orphans);
void Abandon(Orphans* orphans, Home* home);
// `home` may be nullptr (a thread exiting): the block then comes from the heap.
void* Allocate(Home* home, size_t size, size_t max_kept);
// The owner, its kept list empty: takes the blocks other threads returned to `home`. Returns one
// of them (nullptr when none came back) and keeps the others, freeing what would leave more than
// `max_kept` free.
void* TakeReturned(Home* home, size_t max_kept);
// Frees a block of a home that is not this thread's (or one beyond its owner's limit).
void Free(void* p);
size_t FreeBlocks(Home* home);

}  // namespace home_pool_internal

template <typename Tag, size_t kMaxKeptBlocks>
class HomePool {
 public:
  // Free blocks a home keeps for reuse.
  static constexpr size_t kMaxKept = kMaxKeptBlocks;

  // A block of `size` bytes (aligned like malloc's), from this thread's home when it has one
  // free, else from the heap. Meant for one object size: a home keeps blocks of the first size
  // asked of it, and a block of another size comes from (and goes back to) the heap.
  static void* Allocate(size_t size) {
    Home* home = Mine();
    if (home != nullptr && home->block_size == size) {
      if (home_pool_internal::Header* h = home->kept) {  // the fast path: the owner's own list
        home->kept = h->next;
        home->kept_count--;
        return h + 1;
      }
      // Its own list ran dry: blocks other threads freed come back with one exchange. (A reactor
      // whose blocks die on workers takes this path on most allocations.)
      if (void* p = home_pool_internal::TakeReturned(home, kMaxKept)) return p;
    }
    return home_pool_internal::Allocate(ThisThreadHome(), size, kMaxKept);
  }
  // Any thread: returns `p` (from Allocate) to the home it came from.
  static void Free(void* p) {
    Home* mine = Mine();
    if (p != nullptr && mine != nullptr) {
      auto* h = static_cast<home_pool_internal::Header*>(p) - 1;
      if (h->home == mine && mine->kept_count < kMaxKept) {
        h->next = mine->kept;  // freed by its owner: no other thread touches the kept list
        mine->kept = h;
        mine->kept_count++;
        return;
      }
    }
    home_pool_internal::Free(p);
  }

  // This thread's home's free blocks (kept and returned), for tests. Walks the returned list:
  // call it when no other thread frees concurrently.
  static size_t FreeBlocksOnThisThreadForTests() {
    return home_pool_internal::FreeBlocks(ThisThreadHome());
  }

 private:
  using Home = home_pool_internal::Home;
  // The thread's home in this pool (nullptr: none yet, or the thread is exiting). Trivially
  // destructible storage: usable while other thread_locals are being destroyed.
  static Home*& Mine() {
    thread_local Home* home = nullptr;
    return home;
  }
  // The thread's home, made (or adopted) on first use and given up at thread exit.
  static Home* ThisThreadHome() {
    Home*& home = Mine();
    thread_local bool exited = false;
    if (home != nullptr || exited) return home;
    static auto* orphans = new home_pool_internal::Orphans;  // never destroyed
    home = home_pool_internal::AdoptOrCreate(orphans);
    struct GiveUp {
      home_pool_internal::Orphans* orphans;
      Home** home;
      bool* exited;
      ~GiveUp() {
        home_pool_internal::Abandon(orphans, *home);
        *home = nullptr;
        *exited = true;  // from now on this thread allocates from the heap
      }
    };
    thread_local GiveUp give_up{orphans, &home, &exited};
    (void)give_up;
    return home;
  }
};

}  // namespace rrpc
