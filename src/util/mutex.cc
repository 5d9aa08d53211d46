#include "rrpc/util/mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace rrpc {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex syscall needs a plain 32-bit word");

void Mutex::LockContended() {
  // Announce a sleeper before sleeping, so that the owner's Unlock wakes one. A thread that takes
  // the lock this way leaves it marked "with sleepers" even if it was the last one: at worst one
  // needless wake later, never a lost one.
  uint32_t* word = reinterpret_cast<uint32_t*>(&state_);
  while (state_.exchange(kTakenWithSleepers, std::memory_order_acquire) != kFree) {
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, kTakenWithSleepers, nullptr, nullptr, 0);
  }
}

void Mutex::WakeOne() {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
          0);
}

}  // namespace rrpc
