// How the data pages (web_pages.h) write values: times, sizes and ages as an operator reads them,
// and JSON objects for their `?format=json` answers. Pure functions and a builder over a caller's
// string: thread-safe, any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rrpc::web_page {

// `v` formatted by printf's `format` (one double conversion, e.g. "%.2f s").
std::string FormatDouble(const char* format, double v);

// "850 µs", "12.3 ms", "2.05 s"; "—" for a negative (not reached) time.
std::string FormatMicros(int64_t us);

// The time from `from_us` to `to_us` on a call's timeline, or "—" if it never got to either.
std::string FormatPhase(int64_t from_us, int64_t to_us);

// "512 B", "1.50 KiB", "12.3 MiB".
std::string FormatBytes(uint64_t bytes);

// "42.0 s", "3 m 12 s", "2 h 05 m", "4 d 03 h".
std::string FormatAge(double seconds);

// "2026-12-02 14:02:41.123 UTC".
std::string FormatWallTime(int64_t unix_us);

// The wall clock, in microseconds since the Unix epoch.
int64_t NowUnixMicros();

// Appends one JSON object member by member: {"a":1,"b":"x"}. Strings are escaped. Used by one
// thread at a time.
//
//   JsonObject o(&out);
//   o.Str("peer", peer).Int("call_id", 7);
//   AppendList(o.Member("calls"));  // a nested value the caller writes
//   o.Close();
class JsonObject {
 public:
  explicit JsonObject(std::string* out);
  JsonObject& Str(std::string_view key, std::string_view value);
  JsonObject& Int(std::string_view key, int64_t value);
  // Null for a negative value: a time on a call's timeline that was not reached.
  JsonObject& IntOrNull(std::string_view key, int64_t value);
  JsonObject& Uint(std::string_view key, uint64_t value);
  JsonObject& Double(std::string_view key, double value);
  JsonObject& Bool(std::string_view key, bool value);
  // Starts a member whose value (an array, an object) the caller appends to the result next.
  std::string* Member(std::string_view key) { return Key(key); }
  void Close() { out_->push_back('}'); }

 private:
  std::string* Key(std::string_view key);

  std::string* out_;
  bool first_ = true;
};

// Appends a JSON array of one object per item: [{...},{...}]. `add_members(item, &object)`
// adds each object's members.
template <typename Item, typename AddMembers>
void AppendJsonArray(const std::vector<Item>& items, AddMembers add_members, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < items.size(); i++) {
    if (i > 0) out->push_back(',');
    JsonObject object(out);
    add_members(items[i], &object);
    object.Close();
  }
  out->push_back(']');
}

}  // namespace rrpc::web_page
