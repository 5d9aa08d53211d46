// Test helper: a resolver listener that records every update, and waits (bounded, on a condition
// variable) for an update that matches. Thread-safe: the resolver's thread pushes, the test waits.
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "rrpc/rpc/discovery/resolver.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

class UpdateRecorder {
 public:
  ResolverListener Listener() {
    return [this](const Result<std::vector<Sockaddr>>& update) {
      MutexLock l(mu_);
      updates_.push_back(update);
      cv_.NotifyAll();
    };
  }

  // Waits up to `timeout` for an update (old or new, not yet consumed) that satisfies `pred`;
  // consumes it and every one before it. False on timeout.
  bool WaitFor(const std::function<bool(const Result<std::vector<Sockaddr>>&)>& pred,
               MonoDelta timeout = MonoDelta::FromSeconds(30)) {
    const MonoTime deadline = MonoTime::Now() + timeout;
    MutexLock l(mu_);
    for (;;) {
      while (!updates_.empty()) {
        const bool match = pred(updates_.front());
        updates_.pop_front();
        if (match) return true;
      }
      if (MonoTime::Now() >= deadline) return false;
      cv_.WaitUntil(mu_, deadline);
    }
  }

  // Waits for a good update equal (as a set) to `want` ("127.0.0.1:1" strings).
  bool WaitForSet(std::vector<std::string> want, MonoDelta timeout = MonoDelta::FromSeconds(30)) {
    std::sort(want.begin(), want.end());
    return WaitFor(
        [&](const Result<std::vector<Sockaddr>>& u) {
          if (!u.ok()) return false;
          std::vector<std::string> got;
          for (const Sockaddr& a : *u) got.push_back(a.ToString());
          std::sort(got.begin(), got.end());
          return got == want;
        },
        timeout);
  }

  bool WaitForError(MonoDelta timeout = MonoDelta::FromSeconds(30)) {
    return WaitFor([](const Result<std::vector<Sockaddr>>& u) { return !u.ok(); }, timeout);
  }

  // Updates received and not consumed yet.
  size_t pending() {
    MutexLock l(mu_);
    return updates_.size();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<Result<std::vector<Sockaddr>>> updates_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rpc
