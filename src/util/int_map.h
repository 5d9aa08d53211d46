// IntMap<V>: a hash map from int32 keys to movable values, by open addressing (linear probing,
// at most half full, deletion by shifting the run back: no tombstones). For one thread's map of
// small keys it looks up often, such as a client connection's calls awaiting their response, by
// call id. Not thread-safe: its owner's thread only.
//
// Why not std::unordered_map: per call the client inserted, found and erased one node (a node
// per entry, a bucket array, the generic hash and node bookkeeping), where a probe into one flat
// array costs a few instructions.
// Keys come from the owner (its own call ids), so no peer chooses where they land.
//
//   IntMap<scoped_refptr<OutboundCall>> awaiting;
//   awaiting.Insert(call->call_id(), call);
//   scoped_refptr<OutboundCall> answered;
//   if (awaiting.Erase(header.call_id, &answered)) answered->Finish(...);
#pragma once

#include <glog/logging.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace rrpc {

template <typename V>
class IntMap {
 public:
  IntMap() = default;  // Allocates nothing until the first Insert.
  IntMap(const IntMap&) = delete;
  IntMap& operator=(const IntMap&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The value of `key`, or nullptr. Valid until the next Insert or Erase.
  V* Find(int32_t key) {
    if (size_ == 0) return nullptr;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.key == key) return &s.value;
    }
  }

  // REQUIRES: `key` is not in the map.
  void Insert(int32_t key, V value) {
    if ((size_ + 1) * 2 > capacity()) Grow();
    size_t i = Home(key);
    while (slots_[i].used) {
      DCHECK(slots_[i].key != key) << "key " << key << " inserted twice";
      i = (i + 1) & mask_;
    }
    slots_[i].used = true;
    slots_[i].key = key;
    slots_[i].value = std::move(value);
    size_++;
  }

  // Inserts `key` unless it is there already (then false, and the map is unchanged): one probe
  // where Find and Insert take two.
  bool TryInsert(int32_t key, V value) {
    if ((size_ + 1) * 2 > capacity()) Grow();
    size_t i = Home(key);
    while (slots_[i].used) {
      if (slots_[i].key == key) return false;
      i = (i + 1) & mask_;
    }
    slots_[i].used = true;
    slots_[i].key = key;
    slots_[i].value = std::move(value);
    size_++;
    return true;
  }

  // Removes `key`; false if it was not there. Its value goes to *out when `out` is given.
  bool Erase(int32_t key, V* out = nullptr) {
    if (size_ == 0) return false;
    size_t i = Home(key);
    while (true) {
      if (!slots_[i].used) return false;
      if (slots_[i].key == key) break;
      i = (i + 1) & mask_;
    }
    if (out != nullptr) *out = std::move(slots_[i].value);
    // Close the gap: a later entry of the run whose home is not between the gap and itself
    // (cyclically) would no longer be found past an empty slot, so it moves into the gap.
    for (size_t j = (i + 1) & mask_; slots_[j].used; j = (j + 1) & mask_) {
      const size_t home = Home(slots_[j].key);
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i].key = slots_[j].key;
        slots_[i].value = std::move(slots_[j].value);
        i = j;
      }
    }
    slots_[i].used = false;
    slots_[i].value = V();
    size_--;
    return true;
  }

  // Calls f(key, value&) for every entry, in no particular order. `f` must not change the map.
  template <typename F>
  void ForEach(F&& f) {
    for (size_t i = 0; i < capacity(); i++) {
      if (slots_[i].used) f(slots_[i].key, slots_[i].value);
    }
  }

  void swap(IntMap& other) {
    std::swap(slots_, other.slots_);
    std::swap(mask_, other.mask_);
    std::swap(shift_, other.shift_);
    std::swap(size_, other.size_);
  }

 private:
  struct Slot {
    int32_t key = 0;
    bool used = false;
    V value{};
  };

  // Small: a client connection's map holds its calls in flight, often one (a synchronous
  // caller), and keeps its array while idle; a busier one doubles to its size once.
  static constexpr size_t kInitialCapacity = 4;

  size_t capacity() const { return slots_ == nullptr ? 0 : mask_ + 1; }

  // Fibonacci hashing (the product's top bits): sequential ids (the common case) and strided
  // ones (every other id, when calls alternate between two connections) spread over the table.
  size_t Home(int32_t key) const {
    return static_cast<size_t>((static_cast<uint32_t>(key) * 2654435769u) >> shift_);
  }

  void Grow() {
    const size_t old_capacity = capacity();
    std::unique_ptr<Slot[]> old = std::move(slots_);
    const size_t new_capacity = old_capacity == 0 ? kInitialCapacity : old_capacity * 2;
    slots_.reset(new Slot[new_capacity]);
    mask_ = new_capacity - 1;
    shift_ = 32 - __builtin_ctzll(new_capacity);
    size_ = 0;
    for (size_t i = 0; i < old_capacity; i++) {
      if (old[i].used) Insert(old[i].key, std::move(old[i].value));
    }
  }

  std::unique_ptr<Slot[]> slots_;
  size_t mask_ = 0;
  int shift_ = 32;  // 32 - log2(capacity)
  size_t size_ = 0;
};

}  // namespace rrpc
