// ThreadStash<T, kCapacity, kRelease>: per thread, a bounded stack of small values kept for reuse
// (freed buffers, cleared messages), so a hot path can skip an allocation and a free. Each
// instantiation is one stash per thread.
//
// Its storage is trivially destructible, so it stays usable while other thread_locals are being
// destroyed at thread exit (a value freed then is simply not kept); at thread exit it hands what
// it holds to kRelease and keeps nothing more. T must be trivial (a pointer, or a small struct of
// them).
//
//   void FreeBuffer(void* p) { free(p); }
//   using BufferStash = ThreadStash<void*, 4, FreeBuffer>;
//   void* p;
//   if (!BufferStash::Pop(&p)) p = malloc(n);
//   ...
//   if (!BufferStash::Push(p)) free(p);
#pragma once

#include <type_traits>

namespace rrpc {

template <typename T, int kCapacity, void (*kRelease)(T)>
class ThreadStash {
  static_assert(std::is_trivial_v<T>, "the stash's thread-local storage must need no destructor");

 public:
  // Keeps `item` for this thread; false (the caller disposes of it) when full or at thread exit.
  static bool Push(T item) {
    Slots& s = slots_;
    if (s.closed || s.count == kCapacity) return false;
    thread_local Cleanup cleanup;  // registered on first use, runs at thread exit
    (void)cleanup;
    s.items[s.count++] = item;
    return true;
  }

  // Takes the most recently kept item for which `match(item)` holds.
  template <typename Match>
  static bool Pop(Match match, T* out) {
    Slots& s = slots_;
    for (int i = s.count - 1; i >= 0; i--) {
      if (!match(s.items[i])) continue;
      *out = s.items[i];
      s.items[i] = s.items[--s.count];  // the last one fills the hole
      return true;
    }
    return false;
  }
  static bool Pop(T* out) {
    Slots& s = slots_;
    if (s.count == 0) return false;
    *out = s.items[--s.count];
    return true;
  }

 private:
  struct Slots {
    T items[kCapacity];
    int count;
    bool closed;
  };
  struct Cleanup {
    ~Cleanup() {
      Slots& s = slots_;
      s.closed = true;
      while (s.count > 0) kRelease(s.items[--s.count]);
    }
  };
  static thread_local Slots slots_;
};

template <typename T, int kCapacity, void (*kRelease)(T)>
thread_local
    typename ThreadStash<T, kCapacity, kRelease>::Slots ThreadStash<T, kCapacity, kRelease>::slots_;

}  // namespace rrpc
