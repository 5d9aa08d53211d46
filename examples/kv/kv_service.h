// KvService: the example storage server's RPC service, a key-value store on one RocksDB
// database. Values of at least `sidecar_threshold` bytes are answered as response sidecars, and
// large request values arrive as request sidecars (see kv.proto), so they are never copied into
// or out of protobuf. Handlers run on worker threads (never reactors), several at once: the
// service is thread-safe. Each call uses the database through a KvDb::Ref, so the database may
// be reopened under running calls (those meanwhile get ServiceUnavailable: retry).
//
// The stream methods (ScanStream, Load, CopyRangeTo; docs/kv-streams.md) start their work on
// the service's KvStreamPump and return: an open stream holds no worker and no pump thread while
// its peer is slow, only its window of messages.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "kv/kv.rrpc.h"
#include "kv/kv_open_streams.h"
#include "kv/kv_stream_pump.h"
#include "kv/kv_stream_stats.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/status.h"
#include "util/metrics/counter.h"
#include "util/metrics/metric_prototype.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::kv {

class KvDb;
class KvDbHealth;

struct KvServiceOptions {
  // Values of at least this many bytes go back to the client as sidecars.
  size_t sidecar_threshold = 4096;
  // Most pairs, and about the most value bytes, one Scan answers (then has_more).
  uint32_t max_scan_pairs = 10000;
  size_t max_scan_bytes = 16 * 1024 * 1024;
  // fsync the write-ahead log before acknowledging a write: acknowledged writes then survive a
  // machine crash, not only a process crash, at the cost of one fsync per write.
  bool sync_writes = false;
  // Streams: a ScanStream or copy message closes at about this many bytes of keys and values;
  // this many pump threads read and write RocksDB for all the open streams.
  size_t stream_message_bytes = 64 * 1024;
  int stream_pump_threads = 2;
};

// The service's counters, in the server's metrics (entity "kv_service", id "kv").
inline constexpr MetricPrototype METRIC_kv_values_received_as_sidecars_total =
    MetricPrototype::Counter(
        "kv_values_received_as_sidecars_total", "Values received as sidecars", MetricUnit::kEntries,
        "Put and Batch values that arrived as request sidecars (large values).");
inline constexpr MetricPrototype METRIC_kv_values_sent_as_sidecars_total = MetricPrototype::Counter(
    "kv_values_sent_as_sidecars_total", "Values sent as sidecars", MetricUnit::kEntries,
    "Get and Scan values answered as response sidecars (large values).");

class KvService : public KvServiceIf {
 public:
  // `db` is used, not owned; it outlives the service. The service's counters live in `metrics` (the
  // server's registry, which outlives the service), entity "kv_service". `health` (optional,
  // outlives the service) refuses writes while the database recovers from a background error.
  KvService(KvDb* db, KvServiceOptions options, MetricRegistry* metrics,
            const KvDbHealth* health = nullptr);
  ~KvService() override;

  // Starts the stream pump; CopyRangeTo calls its targets on `messenger` (the server's, which
  // owns this service: hence weak). Call once, before the service serves.
  Status StartStreams(std::weak_ptr<rpc::Messenger> messenger);
  // Stops the stream pump: streams still open end (released), copies answer Aborted. Call after
  // the messenger stopped serving, before the database closes. Idempotent.
  void StopStreams();
  // Ends the open streams (ServiceUnavailable: resume after the last key) and refuses new ones.
  // Call before the drain, which a stalled reader would otherwise hold for its whole timeout.
  void EndStreams();

  void Put(const PutRequestPB* req, PutResponsePB* resp, rpc::RpcContext* context) override;
  void Get(const GetRequestPB* req, GetResponsePB* resp, rpc::RpcContext* context) override;
  void Delete(const DeleteRequestPB* req, DeleteResponsePB* resp,
              rpc::RpcContext* context) override;
  void Scan(const ScanRequestPB* req, ScanResponsePB* resp, rpc::RpcContext* context) override;
  void Batch(const BatchRequestPB* req, BatchResponsePB* resp, rpc::RpcContext* context) override;
  // Read, add, write under one lock (increments of any key are serialized): the result tracker
  // keeps retries from adding twice; this lock keeps two different calls from losing one.
  void Increment(const IncrementRequestPB* req, IncrementResponsePB* resp,
                 rpc::RpcContext* context) override;

  void ScanStream(const ScanStreamRequestPB* req,
                  rpc::ServerStream<ScanStreamRequestPB, KvChunkPB> stream) override;
  void Load(rpc::ServerStream<KvChunkPB, LoadResponsePB> stream) override;
  void CopyRangeTo(const CopyRangeRequestPB* req, CopyRangeResponsePB* resp,
                   rpc::RpcContext* context) override;

  const KvStreamStats& stream_stats() const { return stream_stats_; }
  // Tests: runs before each Load message is applied, on a pump thread (may block it: a slow
  // disk). Set before the Load stream opens.
  void set_load_hook(std::function<void()> hook);

  // Tests: runs first in every handler, on its worker (e.g. to hold a worker at a gate).
  void set_handler_hook(std::function<void()> hook);

 private:
  void RunHook();
  // OK, or why writes are refused now (the database recovers from a background error).
  Status WritesAllowed() const;

  KvDb* const db_;
  const KvServiceOptions options_;
  const KvDbHealth* const health_;
  Counter* const values_received_as_sidecars_;
  Counter* const values_sent_as_sidecars_;
  Mutex increment_mu_;
  Mutex hook_mu_;
  std::function<void()> hook_ RRPC_GUARDED_BY(hook_mu_);
  std::atomic<bool> has_hook_{false};
  std::function<void()> load_hook_ RRPC_GUARDED_BY(hook_mu_);

  std::weak_ptr<rpc::Messenger> messenger_;
  KvStreamStats stream_stats_;
  KvOpenStreams open_streams_;
  // Declared last: stopped (joined) first, while what its steps use is still here.
  KvStreamPump pump_;
};

}  // namespace rrpc::kv
