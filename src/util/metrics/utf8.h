// UTF-8 validation for the writers: Prometheus and JSON output must be valid UTF-8 whatever bytes
// an entity id or attribute holds. Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rrpc {
namespace metrics_internal {

// The length (1 to 4) of the well-formed UTF-8 sequence that starts at s[pos], or 0 when the
// bytes there are not one (stray continuation byte, truncated or overlong sequence, surrogate,
// or a code point past U+10FFFF). REQUIRES: pos < s.size().
size_t Utf8SequenceLength(std::string_view s, size_t pos);

// U+FFFD REPLACEMENT CHARACTER, which the writers put in place of each ill-formed byte.
constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

// Appends the well-formed UTF-8 sequence that starts at s[pos], or kUtf8Replacement when there
// is none there; returns how many bytes of `s` that used up (the sequence's length, or 1).
// REQUIRES: pos < s.size().
size_t AppendUtf8OrReplacement(std::string_view s, size_t pos, std::string* out);

}  // namespace metrics_internal
}  // namespace rrpc
