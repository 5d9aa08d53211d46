// PayloadPattern: the request bytes the peers send and the rule that says which response bytes are
// correct, so every response is checked for size and content. Request #seq is a fixed pattern with
// seq stamped over its first (up to 8) bytes, so a response delivered to the wrong call is caught.
// The server answers with the request repeated, or cut, to the response size (a plain echo when the
// sizes match); an empty request is answered with zero bytes.
//
// Immutable after construction: any thread may call it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rrpc {
namespace bench {

class PayloadPattern {
 public:
  PayloadPattern(size_t request_bytes, size_t response_bytes);

  size_t request_bytes() const { return pattern_.size(); }
  size_t response_bytes() const { return response_bytes_; }

  // Writes request #seq (request_bytes() bytes) to dst.
  void FillRequest(uint64_t seq, char* dst) const;

  // True if data[0, len) is the correct response to request #seq.
  bool CheckResponse(uint64_t seq, const char* data, size_t len) const;

  // Server side: writes the response to a request of any size into dst[0, response_len).
  static void BuildResponse(const char* request, size_t request_len, char* dst,
                            size_t response_len);

 private:
  // How many leading bytes of a request carry the sequence number.
  size_t StampBytes() const;

  std::string pattern_;
  size_t response_bytes_;
};

}  // namespace bench
}  // namespace rrpc
