// ChannelOptions: how a cluster channel (channel.h) balances, retries, hedges and judges its
// servers' health. Plain values, set before the channel is made; defaults in docs/cluster.md.
#pragma once

#include <string>

#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

// How a backend is picked per call (balancer.h):
//   kPowerOfTwo (default): two at random, the one with less (outstanding + 1) x EWMA latency.
//   kRoundRobin:           each in turn.
//   kHash:                 a ring of virtual nodes on the controller's hash key (set_hash_key);
//                          calls without a key are balanced as kPowerOfTwo.
enum class BalancerPolicy { kPowerOfTwo, kRoundRobin, kHash };
const char* BalancerPolicyName(BalancerPolicy policy);

// A token bucket for extra attempts (retry_budget.h): each call adds `ratio` of a token, up to
// `max_tokens` (the bucket starts full); an extra attempt takes one, or one of the second's
// `floor_per_second` when the bucket is empty.
struct RetryBudgetOptions {
  double ratio = 0.1;
  int floor_per_second = 10;
  int max_tokens = 100;
};

struct BackendHealthOptions {
  // An ejected backend's first probe comes after `ejection_base`; each failed probe doubles the
  // wait, up to `ejection_max`.
  MonoDelta ejection_base = MonoDelta::FromMilliseconds(100);
  MonoDelta ejection_max = MonoDelta::FromSeconds(10);
};

struct ChannelOptions {
  // Names the channel in metrics, logs and the web UI; empty: the target.
  std::string name;
  BalancerPolicy balancer = BalancerPolicy::kPowerOfTwo;
  // Virtual nodes per server on the hash ring (kHash).
  int ring_vnodes = 160;

  // Attempts per call in all (first, retries and hedges; at most 8), never past the call's
  // deadline, and never twice to one server (except a tracked call's, pinned to the server that
  // may have run it).
  int max_attempts = 3;
  // Wait before a retry: jittered (between half and all of it), doubling up to max_backoff.
  MonoDelta initial_backoff = MonoDelta::FromMilliseconds(1);
  MonoDelta max_backoff = MonoDelta::FromMilliseconds(50);
  RetryBudgetOptions retry_budget;
  // Per-attempt timeout, for idempotent and tracked calls (plain calls get none): an attempt that
  // has not answered within it is given up, and the call is retried (under the same budget and
  // max_attempts), never past the call's own deadline: an idempotent call on another server, a
  // tracked call on the same server with the same request id (docs/exactly-once.md). The given-up
  // attempt may still run on its server. MonoDelta() (default): off, an attempt may take the
  // whole deadline. A controller's RetryPolicy does not apply through a channel (the call fails
  // with InvalidArgument).
  MonoDelta attempt_timeout;

  // Hedging of idempotent calls: after this delay without an answer, a second attempt goes to
  // another server. MonoDelta() (default): off, unless a call asks (set_hedge_after).
  MonoDelta hedge_after;
  // Hedge after the channel's observed p95 latency instead (once it has seen 100 answers);
  // hedge_after is used until then. The p95 is of the answers of the last one or two windows of
  // `hedge_p95_window` (a window closes once it holds 100 answers; latency_window.h), so it
  // follows a shift in latency within two windows.
  bool hedge_after_p95 = false;
  MonoDelta hedge_p95_window = MonoDelta::FromSeconds(5);
  RetryBudgetOptions hedge_budget{0.1, 2, 100};

  BackendHealthOptions health;
};

}  // namespace rrpc::rpc
