#include "rpc/cluster/balancer.h"

#include <algorithm>
#include <random>
#include <string>

#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::rpc {

namespace {

uint64_t Mix(uint64_t h) {  // splitmix64's finalizer
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return Mix(h);
}

// Per calling thread: P2C's random choices need no shared state.
uint64_t NextRandom() {
  thread_local uint64_t state = std::random_device{}() | 1;
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// Reads the clock once per pick, and only when an ejected backend is looked at.
MonoTime Now(MonoTime* now) {
  if (*now == MonoTime()) *now = MonoTime::Now();
  return *now;
}

// Whether `b` may take the call: untried, and in rotation or due a probe.
bool Eligible(const Backend* b, const TriedBackends& tried, MonoTime* now) {
  if (tried.Contains(b)) return false;
  if (!b->ejected()) return true;
  return b->health(Now(now)) != Backend::Health::kEjected;
}

// The cost of `b` now (BackendCost), reading the clock only when it has answered before.
double Cost(const Backend* b, MonoTime* now) {
  const int64_t last = b->last_answer_ns();
  return BackendCost(b->ewma_latency_ns(), last, b->outstanding(),
                     last != 0 ? Now(now) : MonoTime());
}

}  // namespace

double BackendCost(int64_t ewma_latency_ns, int64_t last_answer_ns, int outstanding, MonoTime now) {
  int64_t ewma = ewma_latency_ns;
  if (last_answer_ns != 0) {
    const int64_t silent_ns = now.ToNanoseconds() - last_answer_ns;
    if (outstanding > 0) {
      ewma = std::max(ewma, silent_ns);
    } else if (ewma > 1000) {
      const int64_t silent_s = silent_ns / 1000000000;
      if (silent_s > 0) ewma = silent_s >= 62 ? 0 : ewma >> silent_s;
    }
  }
  return static_cast<double>(outstanding + 1) * static_cast<double>(std::max<int64_t>(ewma, 1000));
}

const char* BalancerPolicyName(BalancerPolicy policy) {
  switch (policy) {
    case BalancerPolicy::kPowerOfTwo:
      return "p2c";
    case BalancerPolicy::kRoundRobin:
      return "round_robin";
    case BalancerPolicy::kHash:
      return "hash";
  }
  return "?";
}

void BuildHashRing(BackendSet* set, int vnodes) {
  set->ring.clear();
  set->ring.reserve(set->backends.size() * static_cast<size_t>(vnodes));
  for (size_t i = 0; i < set->backends.size(); i++) {
    const std::string name = set->backends[i]->addr().ToString();
    for (int v = 0; v < vnodes; v++) {
      set->ring.emplace_back(HashString(name + "#" + std::to_string(v)), static_cast<uint32_t>(i));
    }
  }
  std::sort(set->ring.begin(), set->ring.end());
}

Backend* Balancer::Pick(const BackendSet& set, const RpcController& controller,
                        const TriedBackends& tried) {
  const size_t n = set.backends.size();
  if (n == 0) return nullptr;
  MonoTime now;
  Backend* picked = nullptr;
  if (policy_ == BalancerPolicy::kHash && controller.has_hash_key() && !set.ring.empty()) {
    picked = PickHash(set, controller.hash_key_code(), tried, &now);
  } else if (policy_ == BalancerPolicy::kRoundRobin) {
    picked = PickRoundRobin(set, tried, &now);
  } else {
    picked = PickPowerOfTwo(set, tried, &now);
  }
  if (picked == nullptr) {
    // Every untried backend is ejected: try the one whose probe comes first rather than fail.
    for (const auto& b : set.backends) {
      if (tried.Contains(b.get())) continue;
      if (picked == nullptr || b->ejected_until() < picked->ejected_until()) picked = b.get();
    }
    if (picked == nullptr) return nullptr;
  }
  if (picked->ejected()) picked->ClaimProbe(Now(&now));
  return picked;
}

Backend* Balancer::PickPowerOfTwo(const BackendSet& set, const TriedBackends& tried,
                                  MonoTime* now) {
  const size_t n = set.backends.size();
  if (n == 1) {
    Backend* b = set.backends[0].get();
    return Eligible(b, tried, now) ? b : nullptr;
  }
  const uint64_t r = NextRandom();
  const size_t i = r % n;
  size_t j = (r >> 32) % (n - 1);
  if (j >= i) j++;
  Backend* a = set.backends[i].get();
  Backend* b = set.backends[j].get();
  const bool a_ok = Eligible(a, tried, now);
  const bool b_ok = Eligible(b, tried, now);
  if (a_ok && b_ok) return Cost(a, now) <= Cost(b, now) ? a : b;
  if (a_ok) return a;
  if (b_ok) return b;
  // Both out: the first eligible one after i, if any.
  for (size_t k = 1; k < n; k++) {
    Backend* c = set.backends[(i + k) % n].get();
    if (Eligible(c, tried, now)) return c;
  }
  return nullptr;
}

Backend* Balancer::PickRoundRobin(const BackendSet& set, const TriedBackends& tried,
                                  MonoTime* now) {
  const size_t n = set.backends.size();
  const uint64_t start = next_.fetch_add(1, std::memory_order_relaxed);
  for (size_t k = 0; k < n; k++) {
    Backend* b = set.backends[(start + k) % n].get();
    if (Eligible(b, tried, now)) return b;
  }
  return nullptr;
}

Backend* Balancer::PickHash(const BackendSet& set, uint64_t key, const TriedBackends& tried,
                            MonoTime* now) {
  const auto& ring = set.ring;
  auto it = std::lower_bound(ring.begin(), ring.end(), std::make_pair(key, uint32_t{0}));
  size_t pos = static_cast<size_t>(it - ring.begin());
  // The key's node first; past an excluded backend, the next distinct one clockwise (the
  // replica a shard fails over to is then the same for every caller).
  for (size_t k = 0; k < ring.size(); k++) {
    Backend* b = set.backends[ring[(pos + k) % ring.size()].second].get();
    if (Eligible(b, tried, now)) return b;
  }
  return nullptr;
}

}  // namespace rrpc::rpc
