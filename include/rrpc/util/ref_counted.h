// Intrusive, thread-safe reference counting: RefCounted<T> as a base, scoped_refptr<T> to hold.
// Cheaper than shared_ptr (one allocation, one atomic) and lets a raw pointer be re-wrapped.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace rrpc {

template <typename T>
class RefCounted {
 public:
  void AddRef() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release() const {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      delete static_cast<const T*>(this);
    }
  }
  // True when the caller holds the only reference (then nobody else can add one).
  bool HasOneRef() const { return refs_.load(std::memory_order_acquire) == 1; }

 protected:
  RefCounted() = default;
  ~RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;

 private:
  mutable std::atomic<int32_t> refs_{0};
};

template <typename T>
class scoped_refptr {
 public:
  scoped_refptr() = default;
  scoped_refptr(T* p) : ptr_(p) {  // NOLINT(runtime/explicit)
    if (ptr_) ptr_->AddRef();
  }
  scoped_refptr(const scoped_refptr& o) : scoped_refptr(o.ptr_) {}
  template <typename U>
  scoped_refptr(const scoped_refptr<U>& o) : scoped_refptr(o.get()) {}  // NOLINT
  scoped_refptr(scoped_refptr&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  ~scoped_refptr() {
    if (ptr_) ptr_->Release();
  }
  scoped_refptr& operator=(scoped_refptr o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  T* get() const { return ptr_; }
  T* operator->() const { return ptr_; }
  T& operator*() const { return *ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset() { scoped_refptr().swap(*this); }
  void swap(scoped_refptr& o) noexcept { std::swap(ptr_, o.ptr_); }
  bool operator==(const scoped_refptr& o) const { return ptr_ == o.ptr_; }
  bool operator!=(const scoped_refptr& o) const { return ptr_ != o.ptr_; }

 private:
  T* ptr_ = nullptr;
};

}  // namespace rrpc
