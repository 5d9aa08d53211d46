// ResultTracker: the server half of exactly-once (docs/exactly-once.md). For calls of tracked
// methods that carry a request id (client id, sequence number, the client's lowest number still
// in flight), it runs each id's handler at most once: the first call runs; a retry that arrives
// after it finished gets the stored answer (bytes and sidecars) without running the handler; a
// duplicate that arrives while it runs waits and gets the same answer. Results below a client's
// lowest in-flight number are forgotten; memory has a hard cap, per client and in all; idle
// clients are forgotten after a while.
//
// Thread-safe: reactors admit calls (Admit), the thread that answers a call finishes it (Finish,
// through InboundCall). One mutex; answers are sent outside it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rrpc/rpc/result_tracker_options.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/thread_annotations.h"

namespace rrpc {
class Counter;
class Gauge;
}  // namespace rrpc

namespace rrpc::rpc {

class InboundCall;
class MessengerMetrics;

// A call's request id, copied out of its header (core/header_codec.h) into the call. Only
// `present` is set for every call (it lives in each InboundCall); the rest is written, and may
// be read, only when it is true.
struct TrackedRequestId {
  static constexpr size_t kMaxClientIdBytes = 16;
  bool present = false;
  uint8_t client_id_len;  // 0 or > kMaxClientIdBytes: the id is refused
  uint8_t client_id[kMaxClientIdBytes];
  uint64_t seq_no;
  uint64_t first_incomplete_seq_no;
  uint32_t attempt_no;
  bool valid() const { return client_id_len > 0 && client_id_len <= kMaxClientIdBytes; }
  std::string client_key() const {
    return std::string(reinterpret_cast<const char*>(client_id), client_id_len);
  }
};

// A finished call's answer as it went on the wire: the response (or ErrorStatusPB) body and the
// sidecars after it, in one block, and the header fields that describe them. Immutable; shared
// by every replay.
struct StoredResponse {
  bool is_error = false;
  uint32_t body_bytes = 0;
  std::vector<uint32_t> sidecar_offsets;  // relative to the first byte after the body
  BlockRef bytes;                         // body_bytes of body, then the sidecars
  size_t size = 0;                        // bytes used in `bytes`
};

struct ResultTrackerStats {
  uint64_t replays = 0;   // retries of finished calls answered from their stored result
  uint64_t waits = 0;     // duplicates that waited for a running first call
  uint64_t refused = 0;   // new calls refused (cap, or too many waiters)
  uint64_t stale = 0;     // calls answered ERROR_REQUEST_STALE
  uint64_t evicted = 0;   // finished results evicted by the per-client cap
  uint64_t not_kept = 0;  // results too large to keep
  uint64_t expired_clients = 0;
  size_t bytes = 0;  // held now, bookkeeping included
  size_t clients = 0;
  size_t entries = 0;
};

class ResultTracker {
 public:
  // `metrics`: the messenger's (registers the tracker's metrics there), or nullptr.
  ResultTracker(ResultTrackerOptions options, MessengerMetrics* metrics);
  ~ResultTracker();
  ResultTracker(const ResultTracker&) = delete;
  ResultTracker& operator=(const ResultTracker&) = delete;

  enum class Verdict {
    kRun,       // the first call with its id: run it; its answer is recorded when it responds
    kAnswered,  // answered already (replayed, stale, refused): the caller must not touch it
    kWaiting,   // held until the running call with the same id answers
  };
  // Reactor thread, for a routed call of a tracked method whose header had a request id.
  Verdict Admit(InboundCall* call) RRPC_EXCLUDES(mu_);
  // The thread answering a call admitted with kRun, once: `response` is its answer when its
  // handler ran (kept, and sent to the duplicates waiting), nullptr when it was answered without
  // running (the id is forgotten; the waiting duplicates are told to retry).
  void Finish(const TrackedRequestId& id, std::shared_ptr<const StoredResponse> response)
      RRPC_EXCLUDES(mu_);

  ResultTrackerStats stats() const RRPC_EXCLUDES(mu_);
  const ResultTrackerOptions& options() const { return options_; }

  // Bookkeeping charged per client and per call, besides a result's bytes.
  static constexpr size_t kClientOverhead = 256;
  static constexpr size_t kEntryOverhead = 128;

 private:
  struct Entry {
    bool done = false;
    // done and nullptr: it ran, but its result was not kept (too large).
    std::shared_ptr<const StoredResponse> response;
    std::vector<InboundCall*> waiters;
    size_t bytes = kEntryOverhead;
  };
  struct Client {
    std::map<uint64_t, Entry> entries;  // by sequence number
    // Numbers below are forgotten: the client's lowest in-flight number, raised past evicted
    // results. A call below it that is not held is answered stale.
    uint64_t floor = 0;
    size_t bytes = kClientOverhead;
    size_t running = 0;
    MonoTime last_seen;
  };

  // Forgets the finished entries below `first_incomplete`.
  void Advance(Client* c, uint64_t first_incomplete) RRPC_REQUIRES(mu_);
  // Evicts `c`'s oldest finished entries (but not `keep`) until `need` more bytes fit under the
  // per-client cap; false if they cannot.
  bool MakeRoom(Client* c, size_t need, uint64_t keep) RRPC_REQUIRES(mu_);
  void EraseEntry(Client* c, std::map<uint64_t, Entry>::iterator it) RRPC_REQUIRES(mu_);
  void ExpireIdle(MonoTime now) RRPC_REQUIRES(mu_);
  void UpdateGauges() RRPC_REQUIRES(mu_);

  const ResultTrackerOptions options_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Client> clients_ RRPC_GUARDED_BY(mu_);
  size_t bytes_ RRPC_GUARDED_BY(mu_) = 0;
  size_t entries_ RRPC_GUARDED_BY(mu_) = 0;
  MonoTime next_expiry_scan_ RRPC_GUARDED_BY(mu_);
  ResultTrackerStats counts_ RRPC_GUARDED_BY(mu_);

  // The messenger's metrics (nullptr: none); owned by its registry.
  Counter* replays_metric_ = nullptr;
  Counter* waits_metric_ = nullptr;
  Counter* refused_metric_ = nullptr;
  Counter* stale_metric_ = nullptr;
  Counter* evicted_metric_ = nullptr;
  Gauge* bytes_metric_ = nullptr;
  Gauge* clients_metric_ = nullptr;
};

}  // namespace rrpc::rpc
