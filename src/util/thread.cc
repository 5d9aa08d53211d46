#include "util/thread.h"

#include <glog/logging.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <system_error>
#include <tuple>
#include <utility>

#include "util/countdown_latch.h"

namespace rrpc {

pid_t GetCurrentThreadTid() {
  // One syscall per thread; 0 is never a valid tid, so it marks "not read yet".
  thread_local pid_t tid = 0;
  if (tid == 0) tid = static_cast<pid_t>(syscall(SYS_gettid));
  return tid;
}

void SetCurrentThreadName(const std::string& name) {
  // The kernel rejects names of 16 bytes or more (ERANGE) instead of cutting them.
  constexpr size_t kMaxOsNameLen = 15;
  const std::string os_name = name.substr(0, kMaxOsNameLen);
  int err = pthread_setname_np(pthread_self(), os_name.c_str());
  LOG_IF(WARNING, err != 0) << "pthread_setname_np(" << os_name << ") failed: " << err;
}

ThreadRegistry* ThreadRegistry::Get() {
  // Leaked on purpose: detached threads may unregister during or after static destruction.
  static ThreadRegistry* registry = new ThreadRegistry();
  return registry;
}

void ThreadRegistry::RegisterCurrentThread(std::string category, std::string name) {
  const pid_t tid = GetCurrentThreadTid();
  MutexLock l(mu_);
  bool inserted =
      threads_.emplace(tid, ThreadInfo{std::move(category), std::move(name), tid}).second;
  DCHECK(inserted) << "thread " << tid << " registered twice";
}

void ThreadRegistry::UnregisterCurrentThread() {
  const pid_t tid = GetCurrentThreadTid();
  MutexLock l(mu_);
  size_t erased = threads_.erase(tid);
  DCHECK_EQ(1u, erased) << "thread " << tid << " was not registered";
}

std::vector<ThreadInfo> ThreadRegistry::List() const {
  std::vector<ThreadInfo> out;
  {
    MutexLock l(mu_);
    out.reserve(threads_.size());
    for (const auto& entry : threads_) out.push_back(entry.second);
  }
  std::sort(out.begin(), out.end(), [](const ThreadInfo& a, const ThreadInfo& b) {
    return std::tie(a.category, a.name, a.tid) < std::tie(b.category, b.name, b.tid);
  });
  return out;
}

ScopedThreadRegistration::ScopedThreadRegistration(std::string category, std::string name)
    : tid_(GetCurrentThreadTid()) {
  SetCurrentThreadName(name);
  ThreadRegistry::Get()->RegisterCurrentThread(std::move(category), std::move(name));
}

ScopedThreadRegistration::~ScopedThreadRegistration() {
  DCHECK_EQ(tid_, GetCurrentThreadTid()) << "unregistered from another thread";
  ThreadRegistry::Get()->UnregisterCurrentThread();
}

namespace {
// Blocks the process-directed signals a server acts on for the scope's lifetime. A thread starts
// with its creator's mask, so threads started inside the scope never take these signals: the
// kernel delivers them to a thread that waits for them on purpose (ServerBase's controlling
// thread), not to a worker parked in a futex, which (under TSAN) would defer the handler for as
// long as it sleeps.
class ScopedBlockProcessSignals {
 public:
  ScopedBlockProcessSignals() {
    sigset_t block;
    sigemptyset(&block);
    for (int signo : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
      sigaddset(&block, signo);
    }
    pthread_sigmask(SIG_BLOCK, &block, &saved_);
  }
  ~ScopedBlockProcessSignals() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};
}  // namespace

Result<std::thread> StartThread(std::string category, std::string name, std::function<void()> fn) {
  // Lives on this stack; the new thread touches it only before this function can return.
  CountDownLatch registered(1);
  std::thread thread;
  ScopedBlockProcessSignals no_process_signals_in_new_thread;
  try {
    thread = std::thread([category, name, fn = std::move(fn), &registered]() mutable {
      ScopedThreadRegistration registration(std::move(category), std::move(name));
      registered.CountDown();
      fn();
    });
  } catch (const std::system_error& e) {
    // std::thread reports failure (e.g. EAGAIN: too many threads) only by throwing; turn it
    // into a Status at this boundary.
    return Status::RuntimeError("cannot start thread " + name, e.what(), e.code().value());
  }
  registered.Wait();
  return Result<std::thread>(std::move(thread));
}

}  // namespace rrpc
