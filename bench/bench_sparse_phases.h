// The phases of a sparse run, whichever client makes the connections (bench_sparse.cc: raw
// connections; bench_sparse_messenger.cc: one client Messenger). Sender thread s owns connections
// s, s + senders, s + 2 * senders, ...:
//  1. every sender sets up (its allocations come before the baseline RSS is read);
//  2. every sender opens its connections; the RSS is read again once all are open;
//  3. the senders go round their connections, one call each and a config.sleep_us nap between
//     calls, through the warmup and the measuring window.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "bench/bench_config.h"
#include "bench/bench_runner.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc::bench {

// One sender's way of reaching its connections. Made and used on the sender's thread only.
class SparseSender {
 public:
  virtual ~SparseSender() = default;
  // Opens connection i (negotiated, ready for calls), stamping call `seq` if it makes one.
  virtual Status Open(size_t i, uint64_t seq) = 0;
  // Stamps call `seq` and makes it on connection i, between `*start` and `*end`; then checks
  // the answer.
  virtual Status Call(size_t i, uint64_t seq, MonoTime* start, MonoTime* end) = 0;
};

// Runs the three phases over `connections` connections with config.senders senders, each made
// by make_sender(s) on its own thread. all_open() runs on the calling thread between phases 2
// and 3 (out->rss_all_open_kb is set by then). Fills `out` and returns the run's first failure.
Status RunSparsePhases(const BenchConfig& config, RunControl* control, size_t connections,
                       const std::function<std::unique_ptr<SparseSender>(int s)>& make_sender,
                       const std::function<void()>& all_open, ModeOutput* out);

}  // namespace rrpc::bench
