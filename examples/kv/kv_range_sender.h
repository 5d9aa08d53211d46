// KvRangeSender: reads the pairs of a key range from RocksDB and writes them into a stream as
// KvChunkPB messages, as fast as the stream's peer consumes them: ScanStream's server side
// writes to its client, CopyRangeTo writes into another server's Load.
//
// How it waits: each step runs on a KvStreamPump thread, reads at most `step_bytes` and writes
// with TryWrite. When the stream has no room, the sender keeps the one message that did not fit,
// drops its RocksDB iterator and its KvDb::Ref, and asks OnWritable to submit the next step; the
// next step seeks again after the last key sent. So a stalled reader costs the server its
// stream window plus one message, no thread, no pinned memtable or file, and does not hold off
// a database reopen. Pairs are read at each step's view of the database: a key written during a
// long scan may or may not be seen (as with paging the unary Scan).
//
//   KvRangeSender::Start(db, pump, stream.untyped(), range, options, stats,
//                        [stream](const Status& s) mutable { stream.Finish(s); });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv.pb.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/util/block.h"
#include "rrpc/util/status.h"

namespace rrpc::kv {

class KvDb;
class KvStreamPump;
struct KvStreamStats;

struct KvRangeSenderOptions {
  // A message closes once it holds about this many bytes of keys and values.
  size_t message_bytes = 64 * 1024;
  // Values of at least this many bytes travel as sidecars.
  size_t sidecar_threshold = 4096;
  // Most bytes one step reads before it yields its pump thread to other streams.
  size_t step_bytes = 1 << 20;
  // At most this many pairs; 0: the whole range.
  uint64_t limit = 0;
};

class KvRangeSender : public std::enable_shared_from_this<KvRangeSender> {
 public:
  // Called once, on a pump thread: OK when every pair of the range is queued on the stream (the
  // caller then ends or half-closes it), or why the sender stopped (the database failed, or the
  // stream ended: its status). If the pump stops first, `done` is never called and the stream
  // is released.
  using Done = std::function<void(const Status&)>;

  // Starts sending (the first step is submitted to `pump`). `db`, `pump` and `stats` outlive
  // the sender (the service owns them and stops the pump before they go).
  static void Start(KvDb* db, KvStreamPump* pump, rpc::Stream stream, const KeyRangePB& range,
                    KvRangeSenderOptions options, KvStreamStats* stats, Done done);

  // For Start (make_shared).
  KvRangeSender(KvDb* db, KvStreamPump* pump, rpc::Stream stream, const KeyRangePB& range,
                KvRangeSenderOptions options, KvStreamStats* stats, Done done);
  ~KvRangeSender();

 private:
  // One step: sends the message kept from the last step, then reads and sends until the range
  // ends, the stream is full or the step's budget is spent.
  void Step();
  // Queues the pending message; false when it did not go (the sender then waits or is done).
  bool SendPending();
  void WaitForRoom();
  void Complete(const Status& status);

  KvDb* const db_;
  KvStreamPump* const pump_;
  rpc::Stream stream_;
  const std::string end_;  // empty: no bound
  const KvRangeSenderOptions options_;
  KvStreamStats* const stats_;
  Done done_;

  // Where the next step starts: at resume_key_, or just after it when resume_after_.
  std::string resume_key_;
  bool resume_after_ = false;
  uint64_t pairs_sent_ = 0;
  // The message built but not yet queued (at most one), and its sidecars.
  KvChunkPB pending_;
  std::vector<BlockSlice> pending_sidecars_;
  bool has_pending_ = false;
  bool done_called_ = false;
};

}  // namespace rrpc::kv
