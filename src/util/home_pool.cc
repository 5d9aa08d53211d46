#include "util/home_pool.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace rrpc {

namespace {
// Homes whose threads exited, waiting for a thread to adopt them. Never destroyed (blocks may be
// returned to a home at any time, even during static destruction).
std::mutex* OrphansMutex() {
  static auto* mu = new std::mutex;
  return mu;
}
std::vector<void*>* Orphans() {
  static auto* orphans = new std::vector<void*>;
  return orphans;
}
}  // namespace

HomePool::Home* HomePool::ThisThreadHome() {
  // The thread's home, given up at thread exit. Trivially destructible storage: usable while
  // other thread_locals are being destroyed.
  thread_local Home* home = nullptr;
  thread_local bool exited = false;
  if (home != nullptr || exited) return home;
  {
    std::lock_guard<std::mutex> lock(*OrphansMutex());
    if (!Orphans()->empty()) {
      home = static_cast<Home*>(Orphans()->back());
      Orphans()->pop_back();
    }
  }
  if (home == nullptr) home = new Home;
  struct GiveUp {
    Home** home;
    bool* exited;
    ~GiveUp() {
      std::lock_guard<std::mutex> lock(*OrphansMutex());
      Orphans()->push_back(*home);
      *home = nullptr;
      *exited = true;  // from now on this thread allocates from the heap
    }
  };
  thread_local GiveUp give_up{&home, &exited};
  (void)give_up;
  return home;
}

void* HomePool::Allocate(size_t size) {
  Home* home = ThisThreadHome();
  if (home != nullptr && home->block_size == 0) home->block_size = size;
  if (home == nullptr || home->block_size != size) {
    // This thread is exiting, or the size is not the pool's: a block without a home (the heap's).
    auto* h = static_cast<Header*>(std::malloc(sizeof(Header) + size));
    if (h == nullptr) throw std::bad_alloc();
    h->home = nullptr;
    return h + 1;
  }
  if (home->kept == nullptr) TakeReturned(home);
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

void HomePool::Free(void* p) {
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

void HomePool::TakeReturned(Home* home) {
  Header* h = home->returned.exchange(nullptr, std::memory_order_acquire);
  while (h != nullptr) {
    Header* next = h->next;
    if (home->kept_count < kMaxKept) {
      h->next = home->kept;
      home->kept = h;
      home->kept_count++;
    } else {
      std::free(h);
    }
    h = next;
  }
}

size_t HomePool::FreeBlocksOnThisThreadForTests() {
  Home* home = ThisThreadHome();
  if (home == nullptr) return 0;
  size_t n = home->kept_count;
  for (Header* h = home->returned.load(std::memory_order_acquire); h != nullptr; h = h->next) n++;
  return n;
}

}  // namespace rrpc
