// Busy-waiting helpers, for the few places where a thread is about to sleep on something that
// usually happens within microseconds (a worker waiting for the next call, a caller waiting for
// its response). Sleeping costs the waker a futex syscall and the sleeper a context switch,
// several microseconds on a VM where waking an idle vCPU takes an inter-processor interrupt;
// polling briefly first avoids both when the event comes soon.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdint>

#include "rrpc/util/monotime.h"

namespace rrpc {

// Tells the core that this thread spins on a memory word (x86 PAUSE, Arm YIELD): the sibling
// hyperthread gets the pipeline, and the loop exits without a memory-order mis-speculation
// penalty when the word changes.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `done()` for up to `limit`; returns whether it became true. Reads the clock every 32
// polls. It does not sched_yield(): measured with low-priority busy loops on every core, a yield
// handed the core to such a loop for its whole time slice, and p99 went from 0.13 to 3.4 ms.
template <typename Done>
bool SpinUntil(Done done, MonoDelta limit) {
  if (done()) return true;
  if (limit <= MonoDelta()) return false;
  const MonoTime give_up = MonoTime::Now() + limit;
  for (int i = 1;; i++) {
    if (done()) return true;
    CpuRelax();
    if (i % 32 == 0 && MonoTime::Now() >= give_up) return done();
  }
}

// Whether polling can pay for the calling thread: not when it may run on one CPU only, where a
// poll holds the one core that the thread producing the event needs, so it can never end early
// and only delays that event. A syscall: ask once per poller, not per wait.
inline bool PollingCanPayOnThisThread() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  return sched_getaffinity(0, sizeof(cpus), &cpus) != 0 || CPU_COUNT(&cpus) > 1;
}

// Whether a waiter polls before it sleeps, learning from how its polls went. A hit (the event
// came while polling) saves a sleep and a wake, a miss wastes the whole poll; a score goes up 2
// per hit (up to kMaxScore) and down 1 per miss, and waits poll while it is above zero, i.e.
// while about a third or more of the polls hit. At zero (events come slower than the poll lasts)
// only every kProbeEvery-th wait polls, to notice when they come fast again. Also allows one poll
// at a time per policy: a second poller of the same kind would only burn a core the reactors
// need. Not thread-safe: one per thread, or under the owner's lock.
class PollPolicy {
 public:
  static constexpr uint32_t kMaxScore = 8;
  static constexpr uint32_t kProbeEvery = 64;

  // A wait begins: whether it polls. If it does, EndPoll() must follow.
  bool BeginPoll() {
    if (polling_) return false;
    if (score_ == 0 && ++waits_since_probe_ < kProbeEvery) return false;
    waits_since_probe_ = 0;
    polling_ = true;
    return true;
  }
  void EndPoll(bool hit) {
    polling_ = false;
    if (hit) {
      score_ = std::min(score_ + 2, kMaxScore);
    } else if (score_ > 0) {
      score_--;
    }
  }

 private:
  bool polling_ = false;
  uint32_t score_ = kMaxScore;
  uint32_t waits_since_probe_ = 0;
};

}  // namespace rrpc
