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

// Power of two choices' cost of a backend (lower is better) from what it knows of it: its EWMA
// latency, when its last answer came (MonoTime nanoseconds; 0: none yet), its calls outstanding,
// and the time now. Outstanding calls weighted by latency (at least 1 us, so a backend without
// answers still counts its calls). With calls outstanding and no answer for a while, the silence
// is a floor on its latency: a server that holds calls without answering (dropped packets, a
// hung process) stops drawing calls within milliseconds. Without outstanding calls the latency
// counts half for each second without an answer: a server that was slow, and so stopped being
// picked, gets a call again after a few seconds to show whether it still is. A pure function.
double BackendCost(int64_t ewma_latency_ns, int64_t last_answer_ns, int outstanding, MonoTime now);

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
