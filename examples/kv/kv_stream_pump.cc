#include "kv/kv_stream_pump.h"

#include <string>
#include <utility>

#include "util/thread.h"

namespace rrpc::kv {

KvStreamPump::~KvStreamPump() { Stop(); }

Status KvStreamPump::Start(int num_threads) {
  for (int i = 0; i < std::max(1, num_threads); i++) {
    std::thread t;
    RRPC_ASSIGN_OR_RETURN(t,
                          StartThread("kv", "kv-stream-" + std::to_string(i), [this] { Loop(); }));
    threads_.push_back(std::move(t));
  }
  return Status::OK();
}

void KvStreamPump::Submit(std::function<void()> step) {
  {
    MutexLock lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(step));
      ready_.NotifyOne();
      return;
    }
  }
  step = nullptr;  // destroyed outside the lock: it may release a stream
}

void KvStreamPump::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
    ready_.NotifyAll();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  dropped.clear();
}

void KvStreamPump::Loop() {
  while (true) {
    std::function<void()> step;
    {
      MutexLock lock(mu_);
      while (queue_.empty() && !stopping_) ready_.Wait(mu_);
      if (stopping_) return;
      step = std::move(queue_.front());
      queue_.pop_front();
    }
    step();
  }
}

}  // namespace rrpc::kv
