#include "kv/kv_client.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/rpc_controller.h"
#include "util/countdown_latch.h"

namespace rrpc::kv {

namespace {

// A server refusal means the handler never ran: safe to retry any call.
bool RefusedByServer(const rpc::RpcController& ctl) { return ctl.IsRetriable(); }

// No answer because the connection failed (or could not be made): the call may have run.
bool ConnectionLost(const rpc::RpcController& ctl) {
  if (ctl.error_response() != nullptr) return false;
  const Status& s = ctl.status();
  return s.IsNetworkError() || s.IsIOError() || s.IsEndOfFile();
}

MonoDelta Jittered(MonoDelta base) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t hi = std::max<int64_t>(base.ToNanoseconds(), 2);
  std::uniform_int_distribution<int64_t> dist(hi / 2, hi);
  return MonoDelta::FromNanoseconds(dist(rng));
}

}  // namespace

KvClient::KvClient(std::shared_ptr<rpc::Messenger> messenger, const Sockaddr& server,
                   KvClientOptions options)
    : options_(std::move(options)), proxy_(std::move(messenger), server), on_channel_(false) {}

KvClient::KvClient(std::shared_ptr<rpc::ChannelIf> channel, KvClientOptions options)
    : options_(std::move(options)), proxy_(std::move(channel)), on_channel_(true) {}

Result<std::unique_ptr<KvClient>> KvClient::Connect(std::shared_ptr<rpc::Messenger> messenger,
                                                    const std::string& server,
                                                    KvClientOptions options) {
  if (server.find("://") == std::string::npos) {
    RRPC_ASSIGN_OR_RETURN(Sockaddr addr, Sockaddr::Parse(server));
    return std::make_unique<KvClient>(std::move(messenger), addr, std::move(options));
  }
  rpc::ChannelOptions channel_options;
  channel_options.balancer = rpc::BalancerPolicy::kHash;
  RRPC_ASSIGN_OR_RETURN(auto channel,
                        rpc::Channel::Create(std::move(messenger), server, channel_options));
  // A file, DNS or etcd target knows its servers a moment later; calls made before would fail
  // at once. Without servers by then, the calls say why (the resolver's error).
  (void)channel->WaitForServers(MonoTime::Now() + options.default_timeout);
  return std::make_unique<KvClient>(std::move(channel), std::move(options));
}

MonoTime KvClient::ResolveDeadline(MonoTime deadline) const {
  return deadline == MonoTime() ? MonoTime::Now() + options_.default_timeout : deadline;
}

template <typename Attempt>
Status KvClient::CallWithRetry(bool idempotent, MonoTime deadline, rpc::RpcController* ctlp,
                               const Attempt& attempt) {
  rpc::RpcController& ctl = *ctlp;
  for (int n = 0;; n++) {
    ctl.Reset();
    ctl.set_deadline(deadline);
    CountDownLatch done(1);
    attempt(&ctl, [&done] { done.CountDown(); });
    done.Wait();  // the callback runs exactly once
    if (ctl.status().ok()) return Status::OK();
    const bool retry = RefusedByServer(ctl) || (idempotent && ConnectionLost(ctl));
    if (!retry) return ctl.status();
    int64_t base_ns = options_.initial_backoff.ToNanoseconds();
    for (int i = 0; i < n && base_ns < options_.max_backoff.ToNanoseconds(); i++) base_ns *= 2;
    base_ns = std::min(base_ns, options_.max_backoff.ToNanoseconds());
    const MonoDelta backoff = Jittered(MonoDelta::FromNanoseconds(base_ns));
    if (MonoTime::Now() + backoff >= deadline) {
      return Status::TimedOut("deadline reached while retrying", ctl.status().ToString());
    }
    SleepFor(backoff);
    retries_.fetch_add(1, std::memory_order_relaxed);
  }
}

namespace {
BlockSlice ValueBlock(std::string_view value) {
  // The proxy serializes the request before returning, but sidecars are written later by the
  // reactor: a Block keeps them alive across retries without the caller's buffer.
  BlockRef block = Block::Allocate(value.size());
  memcpy(block->data(), value.data(), value.size());
  return BlockSlice{block, Slice(block->data(), value.size())};
}
}  // namespace

Status KvClient::Put(std::string_view key, std::string_view value, MonoTime deadline) {
  PutRequestPB req;
  req.set_key(key.data(), key.size());
  BlockSlice sidecar;
  if (value.size() >= options_.sidecar_threshold) {
    sidecar = ValueBlock(value);
  } else {
    req.set_value(value.data(), value.size());
  }
  PutResponsePB resp;
  rpc::RpcController ctl;
  return CallWithRetry(true, ResolveDeadline(deadline), &ctl, [&](rpc::RpcController* c, auto cb) {
    if (sidecar.block) req.set_value_sidecar(c->AddOutboundSidecar(sidecar));
    RouteByKey(c, key);
    proxy_.PutAsync(req, &resp, c, std::move(cb));
  });
}

Status KvClient::Increment(std::string_view key, int64_t delta, int64_t* value, MonoTime deadline) {
  IncrementRequestPB req;
  req.set_key(key.data(), key.size());
  req.set_delta(delta);
  IncrementResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_deadline(ResolveDeadline(deadline));
  rpc::RetryPolicy policy;
  policy.max_attempts = options_.increment_max_attempts;
  policy.initial_backoff = options_.initial_backoff;
  policy.max_backoff = options_.max_backoff;
  policy.attempt_timeout = options_.increment_attempt_timeout;
  // Over a channel, the channel's ChannelOptions (attempt_timeout, max_attempts) retry it.
  if (proxy_.channel() == nullptr) ctl.set_retry_policy(policy);
  RouteByKey(&ctl, key);
  Status s = proxy_.Increment(req, &resp, &ctl);
  if (ctl.attempts() > 1) {
    retries_.fetch_add(static_cast<uint64_t>(ctl.attempts() - 1), std::memory_order_relaxed);
  }
  RRPC_RETURN_NOT_OK(s);
  *value = resp.value();
  return Status::OK();
}

Status KvClient::Get(std::string_view key, std::string* value, MonoTime deadline) {
  GetRequestPB req;
  req.set_key(key.data(), key.size());
  GetResponsePB resp;
  rpc::RpcController ctl;  // outlives the call: the response's sidecars are read from it
  Status s =
      CallWithRetry(true, ResolveDeadline(deadline), &ctl, [&](rpc::RpcController* c, auto cb) {
        RouteByKey(c, key);
        proxy_.GetAsync(req, &resp, c, std::move(cb));
      });
  RRPC_RETURN_NOT_OK(s);
  if (!resp.found()) return Status::NotFound("no such key");
  if (resp.has_value_sidecar()) {
    const int32_t i = resp.value_sidecar();
    if (i < 0 || static_cast<size_t>(i) >= ctl.num_inbound_sidecars()) {
      return Status::Corruption("response names a missing sidecar");
    }
    const Slice v = ctl.inbound_sidecar(i);
    value->assign(reinterpret_cast<const char*>(v.data()), v.size());
  } else {
    *value = resp.value();
  }
  return Status::OK();
}

Status KvClient::Delete(std::string_view key, MonoTime deadline) {
  DeleteRequestPB req;
  req.set_key(key.data(), key.size());
  DeleteResponsePB resp;
  rpc::RpcController ctl;
  return CallWithRetry(true, ResolveDeadline(deadline), &ctl, [&](rpc::RpcController* c, auto cb) {
    RouteByKey(c, key);
    proxy_.DeleteAsync(req, &resp, c, std::move(cb));
  });
}

Status KvClient::Scan(std::string_view start, std::string_view end, uint32_t limit,
                      std::vector<std::pair<std::string, std::string>>* pairs, bool* has_more,
                      MonoTime deadline) {
  ScanRequestPB req;
  req.set_start_key(start.data(), start.size());
  if (!end.empty()) req.set_end_key(end.data(), end.size());
  req.set_limit(limit);
  ScanResponsePB resp;
  rpc::RpcController ctl;  // outlives the call: the response's sidecars are read from it
  Status s = CallWithRetry(
      true, ResolveDeadline(deadline), &ctl,
      [&](rpc::RpcController* c, auto cb) { proxy_.ScanAsync(req, &resp, c, std::move(cb)); });
  RRPC_RETURN_NOT_OK(s);
  pairs->clear();
  pairs->reserve(resp.pairs_size());
  for (KvPairPB& pair : *resp.mutable_pairs()) {
    std::string value;
    if (pair.has_value_sidecar()) {
      const int32_t i = pair.value_sidecar();
      if (i < 0 || static_cast<size_t>(i) >= ctl.num_inbound_sidecars()) {
        return Status::Corruption("response names a missing sidecar");
      }
      const Slice v = ctl.inbound_sidecar(i);
      value.assign(reinterpret_cast<const char*>(v.data()), v.size());
    } else {
      value = std::move(*pair.mutable_value());
    }
    pairs->emplace_back(std::move(*pair.mutable_key()), std::move(value));
  }
  if (has_more != nullptr) *has_more = resp.has_more();
  return Status::OK();
}

rpc::StreamOptions KvClient::StreamOptionsFor(MonoTime deadline) const {
  rpc::StreamOptions opts;
  opts.timeout = std::max(deadline - MonoTime::Now(), MonoDelta::FromNanoseconds(1));
  opts.receive_window = options_.stream_receive_window;
  return opts;
}

Status KvClient::ScanStream(std::string_view start, std::string_view end, uint64_t limit,
                            const PairCallback& on_pair, MonoTime deadline) {
  deadline = ResolveDeadline(deadline);
  if (on_channel_) return PagedScan(start, end, limit, on_pair, deadline);
  ScanStreamRequestPB req;
  req.mutable_range()->set_start_key(start.data(), start.size());
  if (!end.empty()) req.mutable_range()->set_end_key(end.data(), end.size());
  req.set_limit(limit);
  auto stream = proxy_.ScanStream(req, StreamOptionsFor(deadline));
  KvChunkPB chunk;
  std::vector<BlockSlice> sidecars;
  while (true) {
    Result<bool> got = stream.Read(&chunk, &sidecars);
    if (!got.ok()) return got.status();
    if (!*got) break;
    for (const KvPairPB& pair : chunk.pairs()) {
      std::string_view value = pair.value();
      if (pair.has_value_sidecar()) {
        const int32_t i = pair.value_sidecar();
        if (i < 0 || static_cast<size_t>(i) >= sidecars.size()) {
          stream.Cancel();
          return Status::Corruption("scan message names a missing sidecar");
        }
        const Slice& v = sidecars[i].slice;
        value = std::string_view(reinterpret_cast<const char*>(v.data()), v.size());
      }
      if (!on_pair(pair.key(), value)) {
        stream.Cancel();
        return Status::OK();
      }
    }
  }
  return stream.Finish();
}

Status KvClient::PagedScan(std::string_view start, std::string_view end, uint64_t limit,
                           const PairCallback& on_pair, MonoTime deadline) {
  std::string next(start);
  uint64_t seen = 0;
  std::vector<std::pair<std::string, std::string>> pairs;
  while (true) {
    bool has_more = false;
    const uint64_t left = limit == 0 ? 0 : limit - seen;
    RRPC_RETURN_NOT_OK(Scan(next, end, static_cast<uint32_t>(std::min<uint64_t>(left, UINT32_MAX)),
                            &pairs, &has_more, deadline));
    for (const auto& [k, v] : pairs) {
      if (!on_pair(k, v)) return Status::OK();
      seen++;
    }
    if (!has_more || pairs.empty() || (limit != 0 && seen >= limit)) return Status::OK();
    next = pairs.back().first;
    next.push_back('\0');  // the smallest key after the last one
  }
}

Status KvClient::Load(const PairSource& next, LoadResponsePB* result, MonoTime deadline) {
  auto stream = proxy_.Load(StreamOptionsFor(ResolveDeadline(deadline)));
  KvChunkPB chunk;
  std::vector<BlockSlice> sidecars;
  size_t bytes = 0;
  auto flush = [&]() -> Status {
    if (chunk.pairs_size() == 0) return Status::OK();
    Status s = stream.Write(chunk, std::move(sidecars));
    chunk.Clear();
    sidecars.clear();
    bytes = 0;
    return s;
  };
  std::string key;
  std::string value;
  while (next(&key, &value)) {
    KvPairPB* pair = chunk.add_pairs();
    pair->set_key(key);
    if (value.size() >= options_.sidecar_threshold) {
      pair->set_value_sidecar(static_cast<int32_t>(sidecars.size()));
      sidecars.push_back(ValueBlock(value));
    } else {
      pair->set_value(value);
    }
    bytes += key.size() + value.size();
    if (bytes >= options_.stream_message_bytes) {
      Status s = flush();
      if (!s.ok()) break;  // the stream ended: Finish says why
    }
  }
  if (stream.status().ok()) {
    Status s = flush();
    (void)s;  // a failed write ended the stream: Finish says why
  }
  stream.CloseWrites();
  LoadResponsePB resp;
  RRPC_RETURN_NOT_OK(stream.Finish(&resp));
  if (result != nullptr) *result = resp;
  return Status::OK();
}

Status KvClient::CopyRange(std::string_view start, std::string_view end, const std::string& target,
                           CopyRangeResponsePB* result, MonoTime deadline) {
  CopyRangeRequestPB req;
  req.set_target(target);
  req.mutable_range()->set_start_key(start.data(), start.size());
  if (!end.empty()) req.mutable_range()->set_end_key(end.data(), end.size());
  CopyRangeResponsePB resp;
  rpc::RpcController ctl;
  RRPC_RETURN_NOT_OK(
      CallWithRetry(true, ResolveDeadline(deadline), &ctl, [&](rpc::RpcController* c, auto cb) {
        proxy_.CopyRangeToAsync(req, &resp, c, std::move(cb));
      }));
  if (result != nullptr) *result = resp;
  return Status::OK();
}

Status KvClient::Batch(const KvBatch& batch, bool idempotent, MonoTime deadline) {
  BatchRequestPB req;
  std::vector<std::pair<BatchOpPB*, BlockSlice>> sidecars;
  for (const KvBatch::Op& op : batch.ops_) {
    BatchOpPB* pb = req.add_ops();
    pb->set_type(op.type);
    pb->set_key(op.key);
    if (op.type != BatchOpPB::PUT) continue;
    if (op.value.size() >= options_.sidecar_threshold) {
      sidecars.emplace_back(pb, ValueBlock(op.value));
    } else {
      pb->set_value(op.value);
    }
  }
  BatchResponsePB resp;
  rpc::RpcController ctl;
  return CallWithRetry(idempotent, ResolveDeadline(deadline), &ctl,
                       [&](rpc::RpcController* c, auto cb) {
                         for (auto& [pb, block] : sidecars) {
                           pb->set_value_sidecar(c->AddOutboundSidecar(block));
                         }
                         proxy_.BatchAsync(req, &resp, c, std::move(cb));
                       });
}

}  // namespace rrpc::kv
