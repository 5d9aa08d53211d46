#include "server/web/web_page_format.h"

#include <cinttypes>
#include <cstdio>
#include <ctime>

#include "util/metrics/json_writer.h"

namespace rrpc::web_page {

std::string FormatDouble(const char* format, double v) {
  char buf[64];
  snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string FormatMicros(int64_t us) {
  if (us < 0) return "—";
  if (us < 1000) return std::to_string(us) + " µs";
  if (us < 10'000) return FormatDouble("%.2f ms", static_cast<double>(us) / 1e3);
  if (us < 1'000'000) return FormatDouble("%.1f ms", static_cast<double>(us) / 1e3);
  return FormatDouble("%.2f s", static_cast<double>(us) / 1e6);
}

std::string FormatPhase(int64_t from_us, int64_t to_us) {
  return from_us < 0 || to_us < 0 ? "—" : FormatMicros(to_us - from_us);
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
    v /= 1024;
    u++;
  }
  return FormatDouble(v < 10 ? "%.2f " : "%.1f ", v) + units[u];
}

std::string FormatAge(double seconds) {
  if (seconds < 0) seconds = 0;
  const int64_t s = static_cast<int64_t>(seconds);
  char buf[64];
  if (s < 60) {
    snprintf(buf, sizeof(buf), "%.1f s", seconds);
  } else if (s < 3600) {
    snprintf(buf, sizeof(buf), "%" PRId64 " m %02" PRId64 " s", s / 60, s % 60);
  } else if (s < 86400) {
    snprintf(buf, sizeof(buf), "%" PRId64 " h %02" PRId64 " m", s / 3600, s % 3600 / 60);
  } else {
    snprintf(buf, sizeof(buf), "%" PRId64 " d %02" PRId64 " h", s / 86400, s % 86400 / 3600);
  }
  return buf;
}

std::string FormatWallTime(int64_t unix_us) {
  const time_t secs = static_cast<time_t>(unix_us / 1'000'000);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[64];
  snprintf(buf, sizeof(buf), "%04d-%02d-%02d %02d:%02d:%02d.%03d UTC", t.tm_year + 1900,
           t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
           static_cast<int>(unix_us % 1'000'000 / 1000));
  return buf;
}

int64_t NowUnixMicros() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

JsonObject::JsonObject(std::string* out) : out_(out) { out_->push_back('{'); }

JsonObject& JsonObject::Str(std::string_view key, std::string_view value) {
  AppendJsonString(value, Key(key));
  return *this;
}

JsonObject& JsonObject::Int(std::string_view key, int64_t value) {
  *Key(key) += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::IntOrNull(std::string_view key, int64_t value) {
  *Key(key) += value < 0 ? "null" : std::to_string(value);
  return *this;
}

JsonObject& JsonObject::Uint(std::string_view key, uint64_t value) {
  *Key(key) += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::Double(std::string_view key, double value) {
  *Key(key) += FormatDouble("%.6g", value);
  return *this;
}

JsonObject& JsonObject::Bool(std::string_view key, bool value) {
  *Key(key) += value ? "true" : "false";
  return *this;
}

std::string* JsonObject::Key(std::string_view key) {
  if (!first_) out_->push_back(',');
  first_ = false;
  AppendJsonString(key, out_);
  out_->push_back(':');
  return out_;
}

}  // namespace rrpc::web_page
