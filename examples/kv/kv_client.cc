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
