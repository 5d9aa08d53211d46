#include "util/metrics/utf8.h"

#include <cstdint>

namespace rrpc {
namespace metrics_internal {

size_t Utf8SequenceLength(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return 1;
  size_t len;
  // The range the second byte must fall in; narrower than 80..BF where the lead byte alone
  // would allow an overlong form, a surrogate (ED A0..BF) or a code point past U+10FFFF.
  uint8_t lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;  // a continuation byte, C0/C1 (always overlong) or F5..FF
  }
  if (pos + len > s.size()) return 0;
  if (byte(pos + 1) < lo || byte(pos + 1) > hi) return 0;
  for (size_t i = 2; i < len; i++) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
  }
  return len;
}

size_t AppendUtf8OrReplacement(std::string_view s, size_t pos, std::string* out) {
  const size_t len = Utf8SequenceLength(s, pos);
  if (len == 0) {
    out->append(kUtf8Replacement);
    return 1;
  }
  out->append(s.substr(pos, len));
  return len;
}

}  // namespace metrics_internal
}  // namespace rrpc
