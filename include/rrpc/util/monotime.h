// MonoTime (a point on the monotonic clock) and MonoDelta (a signed span), in nanoseconds.
// Deadlines are MonoTimes; MonoTime::Max() means "no deadline". Thread-safe value types.
#pragma once

#include <cstdint>
#include <ctime>
#include <limits>
#include <string>

namespace rrpc {

class MonoDelta {
 public:
  constexpr MonoDelta() = default;
  static constexpr MonoDelta FromNanoseconds(int64_t ns) { return MonoDelta(ns); }
  static constexpr MonoDelta FromMicroseconds(int64_t us) { return MonoDelta(us * 1000); }
  static constexpr MonoDelta FromMilliseconds(int64_t ms) { return MonoDelta(ms * 1000000); }
  static constexpr MonoDelta FromSeconds(double s) {
    return MonoDelta(static_cast<int64_t>(s * 1e9));
  }
  static constexpr MonoDelta Max() { return MonoDelta(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t ToNanoseconds() const { return ns_; }
  constexpr int64_t ToMicroseconds() const { return ns_ / 1000; }
  constexpr int64_t ToMilliseconds() const { return ns_ / 1000000; }
  constexpr double ToSeconds() const { return static_cast<double>(ns_) / 1e9; }
  std::string ToString() const;

  constexpr bool operator<(MonoDelta o) const { return ns_ < o.ns_; }
  constexpr bool operator<=(MonoDelta o) const { return ns_ <= o.ns_; }
  constexpr bool operator>(MonoDelta o) const { return ns_ > o.ns_; }
  constexpr bool operator>=(MonoDelta o) const { return ns_ >= o.ns_; }
  constexpr bool operator==(MonoDelta o) const { return ns_ == o.ns_; }
  constexpr bool operator!=(MonoDelta o) const { return ns_ != o.ns_; }
  constexpr MonoDelta operator+(MonoDelta o) const { return MonoDelta(ns_ + o.ns_); }
  constexpr MonoDelta operator-(MonoDelta o) const { return MonoDelta(ns_ - o.ns_); }

 private:
  explicit constexpr MonoDelta(int64_t ns) : ns_(ns) {}
  int64_t ns_ = 0;
};

class MonoTime {
 public:
  constexpr MonoTime() = default;  // the clock's epoch: earlier than any Now()
  static MonoTime Now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return MonoTime(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
  }
  // The latest representable time: "never" as a deadline.
  static constexpr MonoTime Max() { return MonoTime(std::numeric_limits<int64_t>::max()); }
  static constexpr MonoTime FromNanoseconds(int64_t ns) { return MonoTime(ns); }

  constexpr bool IsMax() const { return ns_ == std::numeric_limits<int64_t>::max(); }
  constexpr int64_t ToNanoseconds() const { return ns_; }

  // Saturating: Max() + anything stays Max().
  MonoTime operator+(MonoDelta d) const {
    if (IsMax() || d >= MonoDelta::Max()) return Max();
    int64_t r;
    if (__builtin_add_overflow(ns_, d.ToNanoseconds(), &r)) return Max();
    return MonoTime(r);
  }
  MonoTime operator-(MonoDelta d) const { return MonoTime(ns_ - d.ToNanoseconds()); }
  MonoDelta operator-(MonoTime o) const { return MonoDelta::FromNanoseconds(ns_ - o.ns_); }
  constexpr bool operator<(MonoTime o) const { return ns_ < o.ns_; }
  constexpr bool operator<=(MonoTime o) const { return ns_ <= o.ns_; }
  constexpr bool operator>(MonoTime o) const { return ns_ > o.ns_; }
  constexpr bool operator>=(MonoTime o) const { return ns_ >= o.ns_; }
  constexpr bool operator==(MonoTime o) const { return ns_ == o.ns_; }
  constexpr bool operator!=(MonoTime o) const { return ns_ != o.ns_; }

 private:
  explicit constexpr MonoTime(int64_t ns) : ns_(ns) {}
  int64_t ns_ = 0;
};

// Sleeps the calling thread for `d` (restarts on EINTR).
void SleepFor(MonoDelta d);

}  // namespace rrpc
