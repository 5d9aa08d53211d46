#include "util/log_throttle.h"

namespace rrpc {

bool LogThrottle::AllowAt(MonoTime now, int64_t* dropped) {
  MutexLock lock(mu_);
  if (window_start_ == MonoTime() || now - window_start_ >= period_) {
    window_start_ = now;
    allowed_in_window_ = 0;
  }
  if (allowed_in_window_ >= burst_) {
    dropped_since_last_++;
    total_dropped_++;
    return false;
  }
  allowed_in_window_++;
  if (dropped != nullptr) *dropped = dropped_since_last_;
  dropped_since_last_ = 0;
  return true;
}

int64_t LogThrottle::total_dropped() const {
  MutexLock lock(mu_);
  return total_dropped_;
}

std::string LogThrottle::Suffix(int64_t dropped) {
  if (dropped == 0) return "";
  return " (" + std::to_string(dropped) + " similar messages suppressed)";
}

}  // namespace rrpc
