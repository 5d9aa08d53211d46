#include "bench/bench_payload.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace rrpc::bench {

namespace {

// The byte an empty request's echo carries at offset i.
char EmptyEchoByte(size_t i) { return static_cast<char>((i * 37 + 11) & 0xff); }

}  // namespace

void FillPattern(uint64_t stream, char* dst, size_t len) {
  // A cheap generator whose period is far longer than any payload: a misplaced or shifted chunk
  // never matches by accident.
  uint64_t x = stream * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    dst[i] = static_cast<char>(x >> 56);
  }
}

void FillText(uint64_t stream, char* dst, size_t len) {
  static const char* const kWords[] = {"{\"user\":",
                                       "\"order\":",
                                       "\"status\":\"shipped\",",
                                       "\"status\":\"pending\",",
                                       "\"region\":\"eu-west-1\",",
                                       "\"amount\":",
                                       "\"currency\":\"EUR\",",
                                       "\"items\":[",
                                       "],",
                                       "},",
                                       "\"customer\":\"",
                                       "\",",
                                       "\"created\":\"2026-12-0",
                                       "T10:2"};
  constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  uint64_t x = stream * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  size_t i = 0;
  while (i < len) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const char* word = kWords[(x >> 40) % kNumWords];
    for (; *word != '\0' && i < len; word++) dst[i++] = *word;
    // A number after some words: the digits vary, as ids and amounts do.
    if ((x & 3) == 0 && i < len) dst[i++] = static_cast<char>('0' + (x >> 20) % 10);
    if ((x & 7) == 1 && i < len) dst[i++] = static_cast<char>('0' + (x >> 24) % 10);
  }
}

void StampSequence(uint64_t seq, char* dst, size_t len) {
  const size_t n = std::min<size_t>(8, len);
  for (size_t i = 0; i < n; i++) dst[i] = static_cast<char>(seq >> (8 * i));
}

void BuildEcho(Slice request, char* dst, size_t len) {
  if (request.empty()) {
    for (size_t i = 0; i < len; i++) dst[i] = EmptyEchoByte(i);
    return;
  }
  for (size_t off = 0; off < len; off += request.size()) {
    memcpy(dst + off, request.data(), std::min(request.size(), len - off));
  }
}

Status CheckEcho(Slice request, Slice response, size_t expected_len, const char* what) {
  if (response.size() != expected_len) {
    return Status::Corruption(std::string("response ") + what + " has " +
                              std::to_string(response.size()) + " bytes, expected " +
                              std::to_string(expected_len));
  }
  auto mismatch = [&](size_t i) {
    return Status::Corruption(std::string("response ") + what +
                              " differs from the request at byte " + std::to_string(i) + " of " +
                              std::to_string(expected_len));
  };
  const char* got = response.char_data();
  if (request.empty()) {
    for (size_t i = 0; i < expected_len; i++) {
      if (got[i] != EmptyEchoByte(i)) return mismatch(i);
    }
    return Status::OK();
  }
  for (size_t off = 0; off < expected_len; off += request.size()) {
    const size_t n = std::min(request.size(), expected_len - off);
    if (memcmp(got + off, request.data(), n) != 0) {
      for (size_t i = 0; i < n; i++) {
        if (got[off + i] != request.char_data()[i]) return mismatch(off + i);
      }
    }
  }
  return Status::OK();
}

}  // namespace rrpc::bench
