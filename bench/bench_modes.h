// The four rpc-bench modes. Each runs its clients against config.server, drives the warmup and
// the measuring window through `control`, checks every response, and returns what it measured.
// A failed or wrong call fails the run: the mode returns the first failure (control->error()).
// Called from the main thread; each starts and joins its own threads before returning.
//
//  - throughput: a client Messenger; each client thread keeps async_call_concurrency calls in
//    flight, each completion (on a reactor thread) issuing the next call at once.
//  - latency: one connection, one call at a time: made from the previous call's callback, or
//    with the synchronous proxy from a client thread (config.latency_sync_calls).
//  - cps: each client thread opens a fresh connection (RawRpcConnection), negotiates, makes one
//    call and closes it, in a loop; counts connections.
//  - mixed: one chain of small calls (one at a time, issued from callbacks, as latency mode)
//    while config.mixed_bulk_streams bulk calls with config.mixed_bulk_bytes sidecars are kept in
//    flight, through the same client messenger or one of their own; reports the small calls'
//    latency and, besides, the bulk bytes moved.
//  - stream: config.streams streams on one client connection (bench_stream.cc), in
//    config.stream_direction; both sides write as credit allows (TryWrite, OnWritable) and read
//    from OnReadable callbacks, so no thread waits per stream; every message is checked (order,
//    size, bytes). Reports messages and one-way payload bytes per second and, with
//    config.with_unary_probe, a chain of small calls through the same proxy.
//  - sparse: opens config.connections connections (RawRpcConnection, or with
//    sparse_messenger_client one client Messenger over any transport), then config.senders
//    threads go round them making one call each and sleeping sleep_us in between; measures RSS
//    per connection.
#pragma once

#include <memory>

#include "bench/bench.pb.h"
#include "bench/bench.rrpc.h"
#include "bench/bench_config.h"
#include "bench/bench_runner.h"
#include "rrpc/util/block.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::bench {

Status RunThroughputMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
Status RunLatencyMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
Status RunCpsMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
Status RunSparseMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
Status RunMixedMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
Status RunStreamMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
// cps mode through a client Messenger (config.cps_messenger_client).
Status RunCpsMessengerMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
// sparse mode through a client Messenger (config.sparse_messenger_client).
Status RunSparseMessengerMode(const BenchConfig& config, RunControl* control, ModeOutput* out);
// sparse over the messenger: connection i's remote, loopback address 127.<i / 250>.<i % 250 + 1>
// at `server`'s port (which must be on this host, listening on 0.0.0.0).
Result<Sockaddr> SparseRemote(const Sockaddr& server, int i);

// Shared by the modes (bench_modes.cc).

// Mixed mode's chain of small calls, for another mode to run beside its load: one call of
// config.payload_bytes at a time through `proxy`, each issued by the last one's callback
// (bench_throughput.cc). Start() on the main thread before the window; WaitIdle() after it; then,
// once the client messenger is shut down (no callback runs any more), Merge().
class UnaryProbe {
 public:
  static Result<std::unique_ptr<UnaryProbe>> Start(const BenchConfig& config,
                                                   BenchServiceProxy proxy, RunControl* control);
  virtual ~UnaryProbe() = default;
  // False when the call in flight did not end long after the run stopped.
  virtual bool WaitIdle() = 0;
  virtual void Merge(uint64_t* completed, Histogram* latency_ns) const = 0;
};

// A request of config.payload_bytes of stream `stream`'s pattern, asking for
// config.response_bytes back (the field is left out when they are equal).
void InitRequest(const BenchConfig& config, uint64_t stream, BenchRequestPB* request);
// A client's sidecar in a Block of its own, filled once and stamped per call: a transport that
// can send from registered blocks (RDMA) registers it once and sends it without a copy; TCP sends
// any sidecar from where it is. Stamped only once the previous call finished (its answer in).
struct SidecarBlock {
  SidecarBlock() = default;
  SidecarBlock(uint64_t stream, size_t bytes);
  BlockRef block;
  size_t size = 0;
  char* data() const { return block ? reinterpret_cast<char*>(block->data()) : nullptr; }
  Slice slice() const { return Slice(reinterpret_cast<const uint8_t*>(data()), size); }
  BlockSlice block_slice() const { return BlockSlice{block, slice()}; }
};
// Stamps call `seq` into the request's payload and into `sidecar` (may be empty).
void StampCall(uint64_t seq, BenchRequestPB* request, SidecarBlock* sidecar);
// OK when the response echoes the request (bench_payload.h) and, when a sidecar was sent, exactly
// one response sidecar echoes it.
Status CheckResponse(const BenchConfig& config, const BenchRequestPB& request,
                     const BenchResponsePB& response, Slice request_sidecar,
                     size_t num_response_sidecars, Slice response_sidecar);

}  // namespace rrpc::bench
