// RemoteMethod: one method of a remote service as a proxy calls it: the address called, the
// method's name, the call header's remote_method field encoded once (core/header_codec.h: each call
// copies it whole) and the client metrics of its calls. RemoteMethodCache: a proxy's records, found
// per call without a lock or an allocation.
//
// Why: copying the method name and the address into each call, finding its metrics by name and
// measuring and encoding the two names into the header are a large share of a small call's
// work, and none of them changes between calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::rpc {

struct ClientMethodMetrics;
class MessengerMetrics;

// Immutable once made, but for what its calls learn of the server (peer_reads_compression): any
// thread may read it. Reference counted: a call holds its method's record, and may outlive the
// proxy (and the cache) that made it.
class RemoteMethod : public RefCounted<RemoteMethod> {
 public:
  // `metrics`: owned by the messenger; nullptr when it keeps none.
  RemoteMethod(const Sockaddr& remote, const std::string& service_name,
               const std::string& method_name, ClientMethodMetrics* metrics);

  const Sockaddr& remote() const { return remote_; }
  const std::string& method_name() const { return method_name_; }
  // The header's remote_method field: its tag, length and RemoteMethodPB (EncodeRemoteMethod).
  Slice encoded() const { return Slice(encoded_); }
  ClientMethodMetrics* metrics() const { return metrics_; }
  // Whether the connection of the last call that wanted compression had negotiated COMPRESSION
  // (calls may leave before the negotiation's reply, so a call cannot ask its connection): a
  // call compresses its body only once an earlier one has seen this. Any thread.
  bool peer_reads_compression() const {
    return peer_reads_compression_.load(std::memory_order_relaxed);
  }
  // Reactor thread, as a call that wanted compression finishes on a connection.
  void LearnPeerReadsCompression(bool reads) {
    if (peer_reads_compression() != reads) {
      peer_reads_compression_.store(reads, std::memory_order_relaxed);
    }
  }

 private:
  const Sockaddr remote_;
  const std::string method_name_;
  const std::string encoded_;
  ClientMethodMetrics* const metrics_;
  std::atomic<bool> peer_reads_compression_{false};
};

// A proxy's RemoteMethods by the caller's method string: found by its address and checked by its
// bytes (a short-lived string may later sit at a cached one's address). Misses (the first call
// of each method, or more methods than slots) make the record under a lock. Thread-safe: slots
// are published once, with release/acquire, and never change. One cache serves one messenger
// and one remote (the records carry its metrics and address): not copyable.
class RemoteMethodCache {
 public:
  RemoteMethodCache() = default;
  ~RemoteMethodCache();
  RemoteMethodCache(const RemoteMethodCache&) = delete;
  RemoteMethodCache& operator=(const RemoteMethodCache&) = delete;

  // `metrics`: the messenger's, or nullptr. `remote` and `service` are the same on every call.
  scoped_refptr<RemoteMethod> Get(MessengerMetrics* metrics, const Sockaddr& remote,
                                  const std::string& service, const std::string& method) {
    const int n = size_.load(std::memory_order_acquire);
    for (int i = 0; i < n; i++) {
      const Slot& slot = slots_[i];
      if (slot.key == &method && SameBytes(slot.method->method_name(), method)) {
        return slot.method;
      }
    }
    return GetSlow(metrics, remote, service, method);
  }

 private:
  static constexpr int kSlots = 16;
  struct Slot {
    const std::string* key = nullptr;  // the caller's string when cached; never dereferenced
    RemoteMethod* method = nullptr;    // a reference held by the cache
  };

  // Whether `a` and `b` hold the same bytes: names are short, compared a word at a time (a call
  // to memcmp costs more than the comparison); the last word, of 8 or 4 bytes, may overlap the
  // one before it.
  static bool SameBytes(const std::string& a, const std::string& b) {
    size_t n = a.size();
    if (n != b.size()) return false;
    const char* x = a.data();
    const char* y = b.data();
    if (n < 4) return memcmp(x, y, n) == 0;
    if (n < 8)
      return Word<uint32_t>(x) == Word<uint32_t>(y) &&
             Word<uint32_t>(x + n - 4) == Word<uint32_t>(y + n - 4);
    for (size_t i = 0; i + 8 < n; i += 8) {
      if (Word<uint64_t>(x + i) != Word<uint64_t>(y + i)) return false;
    }
    return Word<uint64_t>(x + n - 8) == Word<uint64_t>(y + n - 8);
  }
  template <typename W>
  static W Word(const char* p) {
    W w;
    memcpy(&w, p, sizeof(w));
    return w;
  }

  scoped_refptr<RemoteMethod> GetSlow(MessengerMetrics* metrics, const Sockaddr& remote,
                                      const std::string& service, const std::string& method);

  Mutex mu_;  // serializes adding slots
  std::atomic<int> size_{0};
  Slot slots_[kSlots];  // [0, size_) published; written under mu_ before size_ grows
};

}  // namespace rrpc::rpc
