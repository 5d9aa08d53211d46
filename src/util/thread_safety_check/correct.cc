// Compiled by check.sh with clang -Wthread-safety -Werror: every access here follows the
// annotations, so it must compile cleanly.
#include "rrpc/util/mutex.h"

namespace {

class Inbox {
 public:
  void Push(int v) RRPC_EXCLUDES(mu_) {
    rrpc::MutexLock l(mu_);
    PushLocked(v);
    ready_.NotifyOne();
  }
  int Pop() RRPC_EXCLUDES(mu_) {
    rrpc::MutexLock l(mu_);
    while (count_ == 0) ready_.Wait(mu_);
    count_--;
    return last_;
  }
  bool TryPeek(int* v) RRPC_EXCLUDES(mu_) {
    if (!mu_.TryLock()) return false;
    *v = last_;
    mu_.Unlock();
    return true;
  }

 private:
  void PushLocked(int v) RRPC_REQUIRES(mu_) {
    last_ = v;
    count_++;
  }
  rrpc::Mutex mu_;
  rrpc::CondVar ready_;
  int last_ RRPC_GUARDED_BY(mu_) = 0;
  int count_ RRPC_GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Inbox inbox;
  inbox.Push(1);
  int v = 0;
  return inbox.TryPeek(&v) ? inbox.Pop() - 1 : 0;
}
