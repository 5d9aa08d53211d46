// Compiled by check.sh with clang -Wthread-safety -Werror: each function below breaks the
// annotations in one way, and the compiler must refuse every one of them (check.sh counts the
// diagnostics by the VIOLATION markers).
#include "rrpc/util/mutex.h"

namespace {

using rrpc::Mutex;
using rrpc::MutexLock;

class Inbox {
 public:
  int ReadUnlocked() { return count_; }  // VIOLATION: reads a guarded field without the lock
  void WriteUnlocked() { count_ = 1; }   // VIOLATION: writes a guarded field without the lock
  void CallUnlocked() { PushLocked(); }  // VIOLATION: calls a REQUIRES function without the lock
  void LockTwice() RRPC_EXCLUDES(mu_) {
    MutexLock a(mu_);
    MutexLock b(mu_);  // VIOLATION: acquires a mutex it already holds
  }

 private:
  void PushLocked() RRPC_REQUIRES(mu_) { count_++; }
  Mutex mu_;
  int count_ RRPC_GUARDED_BY(mu_) = 0;
};

}  // namespace

int main() {
  Inbox inbox;
  inbox.WriteUnlocked();
  inbox.CallUnlocked();
  inbox.LockTwice();
  return inbox.ReadUnlocked();
}
