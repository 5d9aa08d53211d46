// Numbers as text for the metric writers (prometheus_writer.cc, json_writer.cc): the shortest
// decimal form that reads back as the same value, written with std::to_chars (no locale, no
// allocation beyond the output's growth). Pure functions: thread-safe.
#pragma once

#include <charconv>
#include <string>

namespace rrpc {
namespace metrics_internal {

template <typename Int>
void AppendInt(Int v, std::string* out) {
  char buf[24];  // the longest 64-bit integer with its sign is 20 characters
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, res.ptr);
}

// REQUIRES: `v` is finite (each format spells NaN and the infinities its own way).
inline void AppendFiniteDouble(double v, std::string* out) {
  char buf[32];  // the shortest round-trip form of a double is at most 24 characters
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, res.ptr);
}

}  // namespace metrics_internal
}  // namespace rrpc
