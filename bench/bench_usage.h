// What a benchmark run costs: process CPU and context switches (getrusage), the same per thread
// from /proc/self/task split between client and server by thread name, and memory (VmRSS,
// VmHWM). rpc-bench takes a UsageSnapshot at each end of the measuring window and reports the
// difference, so warmup and teardown never count.
//
// Thread roles come from the names in ThreadRegistry (util/thread.h), falling back to the OS name:
// "server..." threads (the server messenger's reactors and workers) are the server, "client..."
// threads (the client messenger's reactors and rpc-bench's own client threads) the client, and
// anything else (the main thread, library threads) is "other".
//
// Functions are thread-safe; a snapshot is a value.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rrpc/util/copy_counter.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc::bench {

enum class ThreadRole { kClient, kServer, kOther };

ThreadRole RoleOfThreadName(const std::string& name);

struct ThreadSample {
  pid_t tid = 0;
  std::string name;
  ThreadRole role = ThreadRole::kOther;
  // Clock ticks, as /proc/<pid>/task/<tid>/stat counts them.
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  uint64_t voluntary_cs = 0;
  uint64_t involuntary_cs = 0;
};

struct UsageSnapshot {
  MonoTime time;
  // Payload bytes copied so far by the RPC paths (util/copy_counter.h), both sides.
  CopyTotals copies;
  rusage process{};
  std::vector<ThreadSample> threads;
  int64_t wire_bytes = -1;  // RunControl::WireBytes()
};

// Reads the process's and every live thread's counters now.
UsageSnapshot TakeUsageSnapshot();

// CPU and context switches of one group of threads (or the process) over an interval.
struct CostTotals {
  double user_s = 0;
  double sys_s = 0;
  uint64_t voluntary_cs = 0;
  uint64_t involuntary_cs = 0;
  double cpu_s() const { return user_s + sys_s; }
  uint64_t cs() const { return voluntary_cs + involuntary_cs; }
};

struct UsageDelta {
  double elapsed_s = 0;
  CostTotals process;  // getrusage(RUSAGE_SELF): every thread, including ones that exited
  CostTotals client;
  CostTotals server;
  CostTotals other;
  // Threads seen at the start but gone at the end: their share is missing from the role split
  // (not from `process`).
  int threads_lost = 0;
  std::string lost_names;  // their names, comma-separated
};

// end - start. Threads born inside the interval count from zero.
UsageDelta SubtractUsage(const UsageSnapshot& start, const UsageSnapshot& end);

// A field of /proc/self/status in kB ("VmRSS", "VmHWM"); -1 when it cannot be read.
int64_t ReadProcessStatusKb(const char* field);

// Makes sure at least `needed` file descriptors may be open, raising the soft limit (and the hard
// one if this process may). IllegalState saying by how much it falls short otherwise.
Status EnsureFileLimit(uint64_t needed);

}  // namespace rrpc::bench
