// Balancers: pick the backend of a call from an immutable BackendSet. A pick reads the set and
// the backends' relaxed counters and takes no lock; any thread may pick at once.
//
//   kPowerOfTwo (default): two backends at random, the one with less (outstanding calls + 1) x
//                          EWMA latency wins: slow or loaded servers get fewer calls.
//   kRoundRobin:           each in turn.
//   kHash:                 a ring of virtual nodes; the controller's hash key picks the first
//                          node at or after it, so adding one of N servers moves ~1/N of keys.
//                          Calls without a key are balanced as kPowerOfTwo.
// Every policy skips backends the call already tried and ejected ones (unless their probe is
// due); when nothing else is left, an ejected backend is tried rather than failing the call.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "rpc/cluster/backend.h"
#include "rrpc/util/ref_counted.h"

namespace rrpc::rpc {

class RpcController;

// One version of a channel's backends: built by the resolver's thread, read by callers, never
// changed once published.
struct BackendSet {
  std::vector<scoped_refptr<Backend>> backends;
  // (point, index into backends), sorted by point; only for kHash.
  std::vector<std::pair<uint64_t, uint32_t>> ring;
  MonoTime retired_at;  // when a newer set replaced it
};

// The ring for `set`'s backends: `vnodes` points per backend, placed by its address.
void BuildHashRing(BackendSet* set, int vnodes);

// Backends a call has tried: excluded from its later picks.
struct TriedBackends {
  static constexpr int kMax = 8;
  const Backend* tried[kMax] = {};
  int n = 0;
  void Add(const Backend* b) {
    if (n < kMax) tried[n++] = b;
  }
  bool Contains(const Backend* b) const {
    for (int i = 0; i < n; i++) {
      if (tried[i] == b) return true;
    }
    return false;
  }
};

class Balancer {
 public:
  explicit Balancer(BalancerPolicy policy) : policy_(policy) {}
  BalancerPolicy policy() const { return policy_; }

  // The backend for a call with `controller` (its hash key), none of `tried`; nullptr when the
  // set holds no other. A probe-due backend picked is claimed (its next probe waits).
  Backend* Pick(const BackendSet& set, const RpcController& controller, const TriedBackends& tried);

 private:
  Backend* PickPowerOfTwo(const BackendSet& set, const TriedBackends& tried, MonoTime* now);
  Backend* PickRoundRobin(const BackendSet& set, const TriedBackends& tried, MonoTime* now);
  Backend* PickHash(const BackendSet& set, uint64_t key, const TriedBackends& tried, MonoTime* now);

  const BalancerPolicy policy_;
  std::atomic<uint64_t> next_{0};  // round robin's turn
};

}  // namespace rrpc::rpc
