#include "bench/peers/payload_pattern.h"

#include <algorithm>
#include <cstring>

namespace rrpc {
namespace bench {

PayloadPattern::PayloadPattern(size_t request_bytes, size_t response_bytes)
    : pattern_(request_bytes, '\0'), response_bytes_(response_bytes) {
  for (size_t i = 0; i < request_bytes; ++i) {
    pattern_[i] = static_cast<char>((i * 131 + 17) & 0xff);
  }
}

size_t PayloadPattern::StampBytes() const { return std::min<size_t>(8, pattern_.size()); }

void PayloadPattern::FillRequest(uint64_t seq, char* dst) const {
  const size_t stamp = StampBytes();
  for (size_t i = 0; i < stamp; ++i) dst[i] = static_cast<char>((seq >> (8 * i)) & 0xff);
  memcpy(dst + stamp, pattern_.data() + stamp, pattern_.size() - stamp);
}

bool PayloadPattern::CheckResponse(uint64_t seq, const char* data, size_t len) const {
  if (len != response_bytes_) return false;
  const size_t req = pattern_.size();
  if (req == 0) {
    for (size_t i = 0; i < len; ++i) {
      if (data[i] != 0) return false;
    }
    return true;
  }
  char stamp_bytes[8];
  const size_t stamp = StampBytes();
  for (size_t i = 0; i < stamp; ++i) stamp_bytes[i] = static_cast<char>((seq >> (8 * i)) & 0xff);
  // The response is the request repeated: compare it one request-sized chunk at a time.
  for (size_t off = 0; off < len; off += req) {
    const size_t n = std::min(req, len - off);
    const size_t head = std::min(stamp, n);
    if (memcmp(data + off, stamp_bytes, head) != 0) return false;
    if (n > head && memcmp(data + off + head, pattern_.data() + head, n - head) != 0) return false;
  }
  return true;
}

void PayloadPattern::BuildResponse(const char* request, size_t request_len, char* dst,
                                   size_t response_len) {
  if (request_len == 0) {
    memset(dst, 0, response_len);
    return;
  }
  for (size_t off = 0; off < response_len; off += request_len) {
    memcpy(dst + off, request, std::min(request_len, response_len - off));
  }
}

}  // namespace bench
}  // namespace rrpc
