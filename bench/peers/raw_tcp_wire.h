// The raw-tcp peer's wire format and its byte buffer. A frame is a 4-byte big-endian payload
// length followed by the payload; nothing else (no header, no serialization), so the peer measures
// what the kernel's TCP path costs and nothing an RPC layer adds.
//
// ByteBuffer is owned and used by one thread (a server loop or a client thread).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace rrpc {
namespace bench {

constexpr size_t kFrameHeaderBytes = 4;
// Larger frames close the connection: the length is checked before anything is buffered.
constexpr uint32_t kMaxFramePayload = 64u << 20;

inline void EncodeFrameLength(uint32_t len, char* dst) {
  dst[0] = static_cast<char>(len >> 24);
  dst[1] = static_cast<char>(len >> 16);
  dst[2] = static_cast<char>(len >> 8);
  dst[3] = static_cast<char>(len);
}

inline uint32_t DecodeFrameLength(const char* src) {
  const auto* p = reinterpret_cast<const unsigned char*>(src);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// A growable byte queue: bytes are appended at the tail and consumed from the head. Space is
// reused once the head catches up, so a steady stream of small frames allocates nothing.
class ByteBuffer {
 public:
  size_t readable() const { return end_ - begin_; }
  const char* data() const { return buf_.data() + begin_; }
  char* data() { return buf_.data() + begin_; }

  // Returns room for at least `n` bytes at the tail; writable() tells how much there is.
  char* EnsureWritable(size_t n) {
    if (buf_.size() - end_ >= n) return buf_.data() + end_;
    if (begin_ > 0) {
      memmove(buf_.data(), buf_.data() + begin_, readable());
      end_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() - end_ < n) buf_.resize(std::max(buf_.size() * 2, end_ + n));
    return buf_.data() + end_;
  }
  size_t writable() const { return buf_.size() - end_; }

  void Commit(size_t n) { end_ += n; }
  void Append(const char* src, size_t n) {
    memcpy(EnsureWritable(n), src, n);
    end_ += n;
  }
  void Consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }

 private:
  std::vector<char> buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace bench
}  // namespace rrpc
