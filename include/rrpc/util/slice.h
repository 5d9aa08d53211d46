// Slice: a non-owning view of bytes (pointer + length). The owner must outlive it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rrpc {

class Slice {
 public:
  constexpr Slice() = default;
  constexpr Slice(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  Slice(const char* data, size_t size)
      : data_(reinterpret_cast<const uint8_t*>(data)), size_(size) {}
  Slice(const std::string& s)  // NOLINT(runtime/explicit)
      : data_(reinterpret_cast<const uint8_t*>(s.data())), size_(s.size()) {}
  Slice(std::string_view s)  // NOLINT(runtime/explicit)
      : data_(reinterpret_cast<const uint8_t*>(s.data())), size_(s.size()) {}
  Slice(const char* s)  // NOLINT(runtime/explicit)
      : data_(reinterpret_cast<const uint8_t*>(s)), size_(strlen(s)) {}

  const uint8_t* data() const { return data_; }
  const char* char_data() const { return reinterpret_cast<const char*>(data_); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint8_t operator[](size_t i) const { return data_[i]; }

  void remove_prefix(size_t n) {
    data_ += n;
    size_ -= n;
  }
  Slice sub(size_t pos, size_t len) const { return Slice(data_ + pos, len); }

  std::string ToString() const { return std::string(char_data(), size_); }

  bool operator==(const Slice& o) const {
    return size_ == o.size_ && (size_ == 0 || memcmp(data_, o.data_, size_) == 0);
  }
  bool operator!=(const Slice& o) const { return !(*this == o); }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace rrpc
