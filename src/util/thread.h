// Thread helpers: start a named std::thread that lists itself in the ThreadRegistry while it runs,
// and read the calling thread's Linux tid. The registry feeds a /threadz page (name, tid and
// category of every live rrpc thread) and lets tests check that threads come and go.
//
//   RRPC_ASSIGN_OR_RETURN(std::thread t, StartThread("reactor", "reactor-0", [this] { Run(); }));
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "rrpc/util/mutex.h"
#include "rrpc/util/status.h"

namespace rrpc {

// The calling thread's Linux thread id (as in `top -H` and /proc/<pid>/task). Cached per thread,
// so cheap enough for DCHECKs.
pid_t GetCurrentThreadTid();

// Sets the calling thread's OS name, as `top -H`, gdb and perf show it. The kernel keeps only the
// first 15 bytes.
void SetCurrentThreadName(const std::string& name);

struct ThreadInfo {
  std::string category;  // What kind of thread: "reactor", "worker", ...
  std::string name;      // The full name (the OS name is cut to 15 bytes).
  pid_t tid = 0;
};

// ThreadRegistry: the set of live rrpc threads. Thread-safe. Threads started by StartThread() are
// listed from before StartThread returns until their function returns; any other thread may list
// itself with a ScopedThreadRegistration.
class ThreadRegistry {
 public:
  // The process-wide registry. Never destroyed, so threads that outlive main() can still
  // unregister.
  static ThreadRegistry* Get();

  // Lists / unlists the calling thread. REQUIRES (Register): the thread is not listed yet.
  void RegisterCurrentThread(std::string category, std::string name);
  void UnregisterCurrentThread();

  // A snapshot, sorted by category, then name, then tid.
  std::vector<ThreadInfo> List() const;

 private:
  mutable Mutex mu_;
  std::map<pid_t, ThreadInfo> threads_ RRPC_GUARDED_BY(mu_);  // By tid.
};

// Lists the calling thread in ThreadRegistry (and sets its OS name) for the object's lifetime.
// Must be destroyed on the thread that created it.
class ScopedThreadRegistration {
 public:
  ScopedThreadRegistration(std::string category, std::string name);
  ~ScopedThreadRegistration();
  ScopedThreadRegistration(const ScopedThreadRegistration&) = delete;
  ScopedThreadRegistration& operator=(const ScopedThreadRegistration&) = delete;

 private:
  const pid_t tid_;
};

// Starts `fn` on a new thread with OS name `name`, listed in ThreadRegistry under `category`.
// The thread blocks SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2 and SIGPIPE: process signals go to
// the program's own threads (e.g. ServerBase::RunUntilSignalled), never to an rrpc thread.
// The listing is in place before this returns and is removed when `fn` returns (so before a
// join() completes). Returns RuntimeError instead of throwing when the OS cannot create a thread.
// The caller owns the returned thread and must join or detach it.
Result<std::thread> StartThread(std::string category, std::string name, std::function<void()> fn);

}  // namespace rrpc
