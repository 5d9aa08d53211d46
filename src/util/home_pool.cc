#include "util/home_pool.h"

#include <cstdlib>
#include <new>

namespace rrpc::home_pool_internal {

Home* AdoptOrCreate(Orphans* orphans) {
  {
    MutexLock lock(orphans->mu);
    if (!orphans->homes.empty()) {
      Home* home = orphans->homes.back();
      orphans->homes.pop_back();
      return home;
    }
  }
  return new Home;  // never destroyed: blocks may come back to it at any time
}

void Abandon(Orphans* orphans, Home* home) {
  MutexLock lock(orphans->mu);
  orphans->homes.push_back(home);
}

void* TakeReturned(Home* home, size_t max_kept) {
  Header* h = home->returned.exchange(nullptr, std::memory_order_acquire);
  if (h == nullptr) return nullptr;
  // As if every block went to the kept list (up to max_kept) and one were taken from it: the last
  // in the list (the first freed) is handed out, the others kept up to max_kept - 1.
  while (h->next != nullptr) {
    Header* next = h->next;
    if (home->kept_count + 1 < max_kept) {
      h->next = home->kept;
      home->kept = h;
      home->kept_count++;
    } else {
      std::free(h);
    }
    h = next;
  }
  return h + 1;
}

void* Allocate(Home* home, size_t size, size_t max_kept) {
  if (home != nullptr && home->block_size == 0) home->block_size = size;
  if (home == nullptr || home->block_size != size) {
    // This thread is exiting, or the size is not the pool's: a block of the heap's.
    auto* h = static_cast<Header*>(std::malloc(sizeof(Header) + size));
    if (h == nullptr) throw std::bad_alloc();
    h->home = nullptr;
    return h + 1;
  }
  if (home->kept == nullptr) {
    if (void* p = TakeReturned(home, max_kept)) return p;
  }
  Header* h = home->kept;
  if (h != nullptr) {
    home->kept = h->next;
    home->kept_count--;
    return h + 1;
  }
  h = static_cast<Header*>(std::malloc(sizeof(Header) + size));
  if (h == nullptr) throw std::bad_alloc();
  h->home = home;
  return h + 1;
}

void Free(void* p) {
  if (p == nullptr) return;
  Header* h = static_cast<Header*>(p) - 1;
  Home* home = h->home;
  if (home == nullptr) {
    std::free(h);
    return;
  }
  // Release: the block's last use (the object's destruction) happens before the owner reuses it.
  Header* head = home->returned.load(std::memory_order_relaxed);
  do {
    h->next = head;
  } while (!home->returned.compare_exchange_weak(head, h, std::memory_order_release,
                                                 std::memory_order_relaxed));
}

size_t FreeBlocks(Home* home) {
  if (home == nullptr) return 0;
  size_t n = home->kept_count;
  for (Header* h = home->returned.load(std::memory_order_acquire); h != nullptr; h = h->next) n++;
  return n;
}

}  // namespace rrpc::home_pool_internal
