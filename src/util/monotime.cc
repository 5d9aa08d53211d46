#include "rrpc/util/monotime.h"

#include <cerrno>
#include <cstdio>

namespace rrpc {

std::string MonoDelta::ToString() const {
  char buf[64];
  if (*this == Max()) return "inf";
  snprintf(buf, sizeof(buf), "%.3fs", ToSeconds());
  return buf;
}

void SleepFor(MonoDelta d) {
  if (d.ToNanoseconds() <= 0) return;
  timespec ts;
  ts.tv_sec = d.ToNanoseconds() / 1000000000;
  ts.tv_nsec = d.ToNanoseconds() % 1000000000;
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

}  // namespace rrpc
