// KvClient: the client of KvService at one server or a cluster of them, with retries. A call that
// the server refused without running it (too busy, shutting down) is retried whatever it is; a call
// whose connection failed (it may or may not have run) is retried only when it is idempotent: Get,
// Scan, Put and Delete are; Batch only when the caller says so. Retries back off exponentially
// with jitter and never pass the call's deadline. Values of at least sidecar_threshold bytes are
// sent as sidecars. Thread-safe: many threads may call one client at once. Calls block; never
// call them on a reactor thread.
//
//   KvClient client(messenger, server_addr);
//   RRPC_RETURN_NOT_OK(client.Put("k", "v"));
//   std::string v;
//   Status s = client.Get("k", &v);  // NotFound when absent
//
// Through a cluster target (KvClient::Connect("etcd://10.0.0.5:2379/kv"), docs/cluster.md) the
// calls go through a channel that balances on a hash of each call's key: one key's calls go to
// one server while the server set stands (the servers are shards; Scan, without a key, goes to
// any), and the channel fails over between servers under the retries above.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/kv.rrpc.h"
#include "rrpc/rpc/channel_if.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::kv {

struct KvClientOptions {
  // Deadline of a call made without one: now + this.
  MonoDelta default_timeout = MonoDelta::FromSeconds(10);
  // Backoff before retry n (from 0): uniform in [b/2, b] with b = min(max, initial * 2^n).
  MonoDelta initial_backoff = MonoDelta::FromMilliseconds(2);
  MonoDelta max_backoff = MonoDelta::FromMilliseconds(500);
  // Values of at least this many bytes travel as sidecars.
  size_t sidecar_threshold = 4096;
  // Increment (a tracked method) to one address: each attempt may take this long; an attempt
  // whose outcome was lost is retried with the same request id, at most increment_max_attempts
  // in all. Over a channel, the channel's ChannelOptions decide instead.
  MonoDelta increment_attempt_timeout = MonoDelta::FromSeconds(1);
  int increment_max_attempts = 20;
  // Streams (ScanStream, Load): bytes the server may send one scan ahead of this client's
  // reading (0: the messenger's stream_window), and the size at which a Load message closes.
  size_t stream_receive_window = 0;
  size_t stream_message_bytes = 64 * 1024;
};

// Operations applied atomically by Batch().
class KvBatch {
 public:
  void Put(std::string key, std::string value) {
    ops_.push_back({BatchOpPB::PUT, std::move(key), std::move(value)});
  }
  void Delete(std::string key) { ops_.push_back({BatchOpPB::DELETE, std::move(key), {}}); }
  size_t size() const { return ops_.size(); }

 private:
  friend class KvClient;
  struct Op {
    BatchOpPB::Type type;
    std::string key;
    std::string value;
  };
  std::vector<Op> ops_;
};

class KvClient {
 public:
  // `messenger` is shared with the client's other users; the client makes its calls on it.
  KvClient(std::shared_ptr<rpc::Messenger> messenger, const Sockaddr& server,
           KvClientOptions options = {});
  // Calls the servers behind `channel` (a cluster channel, rpc/cluster/channel.h); each call
  // carries its key as the controller's hash key.
  explicit KvClient(std::shared_ptr<rpc::ChannelIf> channel, KvClientOptions options = {});
  // `server` is one "host:port", or a cluster target (list://, file://, dns:///, etcd://): then
  // a channel on `messenger` with the hash balancer, returned once its resolver has answered (or
  // after default_timeout). InvalidArgument for a malformed one.
  static Result<std::unique_ptr<KvClient>> Connect(std::shared_ptr<rpc::Messenger> messenger,
                                                   const std::string& server,
                                                   KvClientOptions options = {});

  // Each call's `deadline` bounds it, retries included; MonoTime() (the default) means
  // now + options.default_timeout.
  Status Put(std::string_view key, std::string_view value, MonoTime deadline = MonoTime());
  // NotFound when the key is absent.
  Status Get(std::string_view key, std::string* value, MonoTime deadline = MonoTime());
  Status Delete(std::string_view key, MonoTime deadline = MonoTime());
  // Pairs with keys in [start, end) (end empty: no bound), at most `limit` (0: the server's
  // cap); `*has_more` (may be null) tells whether the server stopped early.
  Status Scan(std::string_view start, std::string_view end, uint32_t limit,
              std::vector<std::pair<std::string, std::string>>* pairs, bool* has_more = nullptr,
              MonoTime deadline = MonoTime());
  // Streams (docs/kv-streams.md). One stream each, not retried (a failure returns its status).
  //
  // Calls `on_pair` with each pair of [start, end) (end empty: no bound) in key order, as the
  // server's messages arrive, on this thread; at most `limit` pairs (0: all). The client holds
  // at most the stream's receive window of unread pairs. `on_pair` returning false stops the
  // scan (cancelled; the call returns OK). Through a cluster channel it pages with Scan instead.
  using PairCallback = std::function<bool(std::string_view key, std::string_view value)>;
  Status ScanStream(std::string_view start, std::string_view end, uint64_t limit,
                    const PairCallback& on_pair, MonoTime deadline = MonoTime());
  // Writes the pairs `next` produces (it returns false after the last) through one Load stream,
  // as fast as the server writes them; `*result` (may be null) gets the server's counts. Each
  // message is applied atomically; after an error, a prefix of the pairs may have been written.
  using PairSource = std::function<bool(std::string* key, std::string* value)>;
  Status Load(const PairSource& next, LoadResponsePB* result = nullptr,
              MonoTime deadline = MonoTime());
  // Asks the server to copy its pairs of [start, end) to the kv-server at `target` (host:port).
  Status CopyRange(std::string_view start, std::string_view end, const std::string& target,
                   CopyRangeResponsePB* result = nullptr, MonoTime deadline = MonoTime());

  // `idempotent`: the caller knows that applying the batch twice is harmless (e.g. only puts of
  // fixed values), so it may be retried after a connection failure too.
  Status Batch(const KvBatch& batch, bool idempotent = false, MonoTime deadline = MonoTime());

  // Adds `delta` to the counter at `key`; `*value` gets the sum. Exactly once against a server
  // that tracks results (docs/exactly-once.md): lost outcomes are retried by the proxy with the
  // call's request id. An error means the addition may or may not have happened once (never
  // twice). Through a channel the call is never retried once sent (a tracked call carries no
  // request id there), so a lost outcome is an error sooner; still never twice.
  Status Increment(std::string_view key, int64_t delta, int64_t* value,
                   MonoTime deadline = MonoTime());

  // Attempts repeated so far, by all calls of this client.
  uint64_t retries() const { return retries_.load(std::memory_order_relaxed); }

 private:
  // Runs `attempt(ctl, callback)`, which starts one async call on `ctl` and returns, until it
  // succeeds, fails for good, or the deadline passes. `ctl` holds the last attempt's outcome.
  template <typename Attempt>
  Status CallWithRetry(bool idempotent, MonoTime deadline, rpc::RpcController* ctl,
                       const Attempt& attempt);
  MonoTime ResolveDeadline(MonoTime deadline) const;
  // ScanStream through a channel: pages with the unary Scan.
  Status PagedScan(std::string_view start, std::string_view end, uint64_t limit,
                   const PairCallback& on_pair, MonoTime deadline);
  // A stream's options for a call ending at `deadline` (resolved).
  rpc::StreamOptions StreamOptionsFor(MonoTime deadline) const;
  // Through a channel: routes the call on `ctl` by `key` (the hash balancer).
  void RouteByKey(rpc::RpcController* ctl, std::string_view key) const {
    if (on_channel_) ctl->set_hash_key(std::string(key));
  }

  const KvClientOptions options_;
  KvServiceProxy proxy_;
  const bool on_channel_;
  std::atomic<uint64_t> retries_{0};
};

}  // namespace rrpc::kv
