// LogThrottle: lets a burst of log lines through per period and counts the rest, so a peer that
// sends garbage on purpose cannot flood the log (one line per bad frame, millions per minute).
// Callers log only when Allow() says so and append how many similar lines were dropped since the
// last one that went out:
//   int64_t dropped;
//   if (throttle.Allow(&dropped)) LOG(WARNING) << msg << LogThrottle::Suffix(dropped);
// Thread-safe (a mutex; only error paths call it).
#pragma once

#include <cstdint>
#include <string>

#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc {

class LogThrottle {
 public:
  // At most `burst` lines per `period`.
  LogThrottle(int burst, MonoDelta period) : burst_(burst), period_(period) {}

  // True when a line may be logged now; `*dropped` (optional) gets the lines refused since the
  // last allowed one.
  bool Allow(int64_t* dropped = nullptr) { return AllowAt(MonoTime::Now(), dropped); }
  // The same at a given time (tests).
  bool AllowAt(MonoTime now, int64_t* dropped);

  // Lines refused so far, in total.
  int64_t total_dropped() const;

  // " (N similar messages suppressed)" or "" for N == 0.
  static std::string Suffix(int64_t dropped);

 private:
  const int burst_;
  const MonoDelta period_;
  mutable Mutex mu_;
  MonoTime window_start_ RRPC_GUARDED_BY(mu_);
  int allowed_in_window_ RRPC_GUARDED_BY(mu_) = 0;
  int64_t dropped_since_last_ RRPC_GUARDED_BY(mu_) = 0;
  int64_t total_dropped_ RRPC_GUARDED_BY(mu_) = 0;
};

}  // namespace rrpc
