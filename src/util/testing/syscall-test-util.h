// Test support: the system call a thread of this process is blocked in, read from
// /proc/self/task/<tid>/syscall, so that a test acts once a thread sleeps in the kernel (on a
// futex word, in a recv()) instead of sleeping and hoping it does by then.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

namespace rrpc {

// The calling thread's id, as /proc/self/task names it.
inline pid_t CurrentTid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Thread `tid` of this process is inside system call `nr` (SYS_futex, SYS_recvfrom...) with
// `arg0` as its first argument (a futex word's address, a descriptor). False while it runs in
// user space or is in another call.
inline bool InSyscall(pid_t tid, long nr, uint64_t arg0) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long got = -1;
  std::string first;
  if (!(in >> got >> first) || got != nr) return false;
  return std::stoull(first, nullptr, 16) == arg0;
}

// Waits until the thread whose id `tid` holds (0: not yet known) is in system call `nr` on
// `arg0`; false after `timeout`.
inline bool WaitUntilInSyscall(const std::atomic<pid_t>& tid, long nr, uint64_t arg0,
                               std::chrono::seconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (tid.load() == 0 || !InSyscall(tid.load(), nr, arg0)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace rrpc
