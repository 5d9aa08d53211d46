// cluster-bench --scenario=drop (cluster_bench_drop.cc): a server's packets dropped under load.
#pragma once

namespace rrpc::bench {

// Runs the scenario with `clients` client messengers of `concurrency` calls in flight each and
// prints its CLUSTER lines; 0 when no call failed (or namespaces cannot be made: "skipped").
int RunDrop(int clients, int concurrency, double steady_seconds, double after_seconds);

}  // namespace rrpc::bench
