// ResumeWhenReady: the on-ready loop of rpc-bench's stream code (client and server). A pump that
// found a stream full (TryWrite: kFull) or empty (TryRead: kEmpty) registers its continuation
// with OnWritable or OnReadable and returns; but the stream may run that callback at once, on the
// registering thread (room or a message came meanwhile). Calling the pump from there would nest
// one stack frame per such race, so instead ResumeWhenReady tells the pump to go on in its loop.
//
//   case StreamWrite::kFull:
//     if (ResumeWhenReady([&](auto cb) { stream.OnWritable(std::move(cb)); },
//                         [self] { Pump(self); })) {
//       continue;  // ready already: go on here
//     }
//     return;  // Pump(self) runs later, on the stream's reactor thread
//
// Any thread; `resume` runs at most once, on the thread of the later callback.
//
// RetryParker: runs parked continuations again after a short pause, on its own thread. A writer
// needs it when OnWritable fires at once but TryWrite still says kFull: the stream counts any
// credit left as room (StreamState::WritableLocked) while TryWrite wants room for the whole
// message, so with 0 < credit < message size the two disagree, and going on in the loop would spin
// (on a reactor thread: the very thread that must read the credit frame). The pump parks itself
// instead and tries again from here. Thread-safe; Stop() (or the destructor) from the owner's
// thread drops what is still parked.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::bench {

// True when the stream was ready during registration (the caller goes on and `resume` never
// runs); false when `resume` will run later.
template <typename Register>
bool ResumeWhenReady(Register&& register_callback, std::function<void()> resume) {
  // 0: registering; 1: the callback fired during registration; 2: registration done.
  auto state = std::make_shared<std::atomic<int>>(0);
  register_callback([state, resume = std::move(resume)] {
    int registering = 0;
    if (state->compare_exchange_strong(registering, 1)) return;
    resume();
  });
  int registering = 0;
  return !state->compare_exchange_strong(registering, 2);
}

class RetryParker {
 public:
  static constexpr MonoDelta kPause = MonoDelta::FromMicroseconds(20);

  RetryParker() : thread_([this] { Loop(); }) {}
  ~RetryParker() { Stop(); }
  RetryParker(const RetryParker&) = delete;
  RetryParker& operator=(const RetryParker&) = delete;

  // Any thread: runs `fn` on the parker's thread after about kPause.
  void Park(std::function<void()> fn) RRPC_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!stopping_) parked_.push_back(std::move(fn));
    cv_.NotifyOne();
  }
  // Owner's thread: joins the thread; what is parked then never runs. Idempotent.
  void Stop() RRPC_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      parked_.clear();
      cv_.NotifyOne();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() RRPC_EXCLUDES(mu_) {
    while (true) {
      {
        MutexLock lock(mu_);
        while (!stopping_ && parked_.empty()) cv_.Wait(mu_);
        if (stopping_) return;
      }
      SleepFor(kPause);
      std::vector<std::function<void()>> due;
      {
        MutexLock lock(mu_);
        due.swap(parked_);
      }
      for (auto& fn : due) fn();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::vector<std::function<void()>> parked_ RRPC_GUARDED_BY(mu_);
  bool stopping_ RRPC_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the constructor, joined by Stop()
};

}  // namespace rrpc::bench
