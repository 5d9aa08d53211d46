// KvLoader: the server side of Load: reads KvChunkPB messages from a client stream and writes
// each as one RocksDB write batch, then finishes the stream with the counts.
//
// How it waits: each step runs on a KvStreamPump thread and applies at most `step_bytes` of
// messages read with TryRead; when none is there it asks OnReadable to submit the next step. So
// a slow client holds no thread, and the server holds at most the stream's receive window of
// unapplied messages: a slow disk stops granting credit, which slows the client (or a copying
// server's range sender) to the disk's pace.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "kv/kv.rrpc.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/util/status.h"

namespace rrpc::kv {

class KvDb;
class KvStreamPump;
struct KvStreamStats;

struct KvLoaderOptions {
  bool sync_writes = false;
  // Most message bytes one step applies before it yields its pump thread to other streams.
  size_t step_bytes = 1 << 20;
  // OK, or why writes are refused now (the stream then ends with it); may be empty.
  std::function<Status()> writes_allowed;
  // Runs once when the loader is done with the stream (answered, or the stream ended).
  std::function<void()> on_end;
  // Tests: runs before each message is applied, on the pump thread (may block it).
  std::function<void()> before_apply;
};

class KvLoader : public std::enable_shared_from_this<KvLoader> {
 public:
  using LoadStream = rpc::ServerStream<KvChunkPB, LoadResponsePB>;

  // Starts reading (the first step is submitted to `pump`). `db`, `pump` and `stats` outlive
  // the loader (the service owns them and stops the pump before they go).
  static void Start(KvDb* db, KvStreamPump* pump, LoadStream stream, KvLoaderOptions options,
                    KvStreamStats* stats);

  // For Start (make_shared).
  KvLoader(KvDb* db, KvStreamPump* pump, LoadStream stream, KvLoaderOptions options,
           KvStreamStats* stats);
  ~KvLoader();

 private:
  void Step();
  // Writes one message's pairs as one batch.
  Status Apply(const KvChunkPB& chunk, const std::vector<BlockSlice>& sidecars);

  KvDb* const db_;
  KvStreamPump* const pump_;
  LoadStream stream_;
  const KvLoaderOptions options_;
  KvStreamStats* const stats_;
  uint64_t pairs_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace rrpc::kv
