// KvStreamStats: what kv's streams did, for the server's metrics and for tests that check flow
// control (how many bytes a scan read ahead of its reader, how often it waited for room).
// Thread-safe (relaxed atomics: each counter is exact, counters are not a consistent snapshot).
#pragma once

#include <atomic>
#include <cstdint>

namespace rrpc::kv {

struct KvStreamStats {
  // Range senders (ScanStream, CopyRangeTo): pairs and bytes (keys + values) read from RocksDB
  // into messages, bytes of messages queued on streams, and the times a sender found no room
  // and waited for its peer.
  std::atomic<uint64_t> pairs_read{0};
  std::atomic<uint64_t> bytes_read{0};
  std::atomic<uint64_t> message_bytes_queued{0};
  std::atomic<uint64_t> waits_for_room{0};
  // Senders waiting for room now.
  std::atomic<int64_t> senders_waiting{0};
  // Load: pairs and bytes (keys + values) written.
  std::atomic<uint64_t> pairs_loaded{0};
  std::atomic<uint64_t> bytes_loaded{0};
  // Range senders and loads running (started, not done).
  std::atomic<int64_t> open{0};
};

}  // namespace rrpc::kv
