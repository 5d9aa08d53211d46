// The parts every rpc-bench mode shares: the run's phases and first failure (RunControl), the
// per-thread completion counters and latency histograms (LatencyRecorders), and what a mode hands
// back to be reported (ModeOutput).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_usage.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/status.h"
#include "util/histogram.h"

namespace rrpc::bench {

// RunControl: where the run is (warming up, measuring, stopping) and its first failure. The main
// thread drives the phases with RunWindow(); client threads and callbacks (on reactor threads)
// read them and report failures. Thread-safe.
class RunControl {
 public:
  enum class Phase : int { kWarmup, kMeasuring, kStopping };

  Phase phase() const { return static_cast<Phase>(phase_.load(std::memory_order_acquire)); }
  bool measuring() const { return phase() == Phase::kMeasuring; }
  bool stopping() const { return phase() == Phase::kStopping; }

  // Any thread: records `status` if it is the first failure, and stops the run.
  void Fail(const Status& status);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status error() const;

  // Main thread: warms up for `warmup_s`, snapshots usage into `start`, measures for `run_s`,
  // snapshots into `end` and enters kStopping. Returns early (still stopping) when the run fails.
  void RunWindow(double warmup_s, double run_s, UsageSnapshot* start, UsageSnapshot* end);
  // Bytes the client has sent and received so far (its messenger's metrics), read at the
  // window's start and end into ModeOutput::wire_bytes. Main thread, before RunWindow.
  void set_wire_bytes(std::function<int64_t()> read) { wire_bytes_ = std::move(read); }
  int64_t WireBytes() const { return wire_bytes_ ? wire_bytes_() : -1; }
  // Main thread, after RunWindow(): how long the phase was kMeasuring (rates divide by this).
  MonoDelta measured() const { return measure_end_ - measure_start_; }
  // Enters kStopping without a window (setup failed).
  void Stop() { phase_.store(static_cast<int>(Phase::kStopping), std::memory_order_release); }

 private:
  // Sleeps until `until` or a failure, whichever comes first.
  void SleepUntil(MonoTime until) const;

  std::atomic<int> phase_{static_cast<int>(Phase::kWarmup)};
  std::atomic<bool> failed_{false};
  std::function<int64_t()> wire_bytes_;  // main thread only
  MonoTime measure_start_;               // main thread only
  MonoTime measure_end_;                 // main thread only
  mutable Mutex mu_;
  Status error_ RRPC_GUARDED_BY(mu_);
};

// LatencyRecorders: one completion counter and latency histogram (nanoseconds) per recording
// thread, so the hot path takes no lock and shares no cache line. Local() is thread-safe; Merge()
// may run only once every recording thread has stopped (joined, or its messenger shut down).
class LatencyRecorders {
 public:
  struct PerThread {
    uint64_t completed = 0;
    Histogram latency_ns{kMaxLatencyNs};
    // One completed call, from `start` to `end`.
    void RecordCall(MonoTime start, MonoTime end) {
      completed++;
      latency_ns.Record(static_cast<uint64_t>((end - start).ToNanoseconds()));
    }
    // Throughput mode: too-busy answers received and calls sent again, inside the window.
    uint64_t rejected = 0;
    uint64_t retries = 0;
  };
  // Latencies up to 100 s keep full precision; longer ones still count (as overflow).
  static constexpr uint64_t kMaxLatencyNs = 100'000'000'000ULL;

  LatencyRecorders();
  // The calling thread's recorder, made on its first call.
  PerThread* Local();
  void Merge(uint64_t* completed, Histogram* latency_ns) const;
  void MergeRetries(uint64_t* rejected, uint64_t* retries) const;

 private:
  const uint64_t id_;  // tells thread-local caches of different instances apart
  mutable Mutex mu_;
  std::vector<std::unique_ptr<PerThread>> recorders_ RRPC_GUARDED_BY(mu_);
};

// What one mode run measured.
struct ModeOutput {
  // Calls (cps: connections) completed inside the window, and their latencies.
  uint64_t completed = 0;
  Histogram latency_ns{LatencyRecorders::kMaxLatencyNs};
  UsageSnapshot window_start;
  UsageSnapshot window_end;
  // How long completions were counted.
  MonoDelta measured;
  // throughput mode: ERROR_SERVER_TOO_BUSY answers and re-sent calls inside the window.
  uint64_t rejected = 0;
  uint64_t retries = 0;
  // mixed mode: bulk calls completed inside the window.
  uint64_t bulk_completed = 0;
  // stream mode: `completed` counts messages and `latency_ns` their delivery (down: from the
  // server's write to the client's read; bidi: the round trip; up: none). stream_bytes: payload
  // and sidecar bytes one way. With a unary probe, its calls and their latency.
  uint64_t stream_bytes = 0;
  uint64_t probe_completed = 0;
  Histogram probe_latency_ns{LatencyRecorders::kMaxLatencyNs};
  // sparse mode: connections held, and VmRSS before opening them, once all were open and at the
  // end of the window.
  int64_t connections = 0;
  int64_t rss_before_open_kb = -1;
  int64_t rss_all_open_kb = -1;
  int64_t rss_after_run_kb = -1;
  // sparse mode over the client messenger: its established connections by transport ("rdma",
  // "tcp", ...; an RDMA connection that fell back counts as tcp).
  std::map<std::string, int64_t> connections_by_transport;
  // throughput mode: bytes the client sent and received inside the window (frames on the
  // wire, compressed or not); -1 when not measured.
  int64_t wire_bytes = -1;
};

}  // namespace rrpc::bench
