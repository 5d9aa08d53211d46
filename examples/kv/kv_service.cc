#include "kv/kv_service.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kv/kv_db.h"
#include "kv/kv_db_health.h"
#include "kv/kv_loader.h"
#include "kv/kv_range_copy.h"
#include "kv/kv_range_sender.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/util/block.h"
#include "util/metrics/counter.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::kv {

namespace {

Status FromRocks(const rocksdb::Status& s) {
  if (s.ok()) return Status::OK();
  if (s.IsNotFound()) return Status::NotFound(s.ToString());
  if (s.IsInvalidArgument()) return Status::InvalidArgument(s.ToString());
  if (s.IsCorruption()) return Status::Corruption(s.ToString());
  return Status::IOError(s.ToString());
}

// The value of a request: inline, or the sidecar it names (its bytes stay in the request's
// frame; RocksDB copies them into its memtable, the only copy on the server).
Status RequestValue(const rpc::RpcContext& context, bool has_inline,
                    const std::string& inline_value, bool has_sidecar, int32_t sidecar,
                    rocksdb::Slice* value) {
  if (has_sidecar) {
    if (has_inline) return Status::InvalidArgument("both value and value_sidecar set");
    if (sidecar < 0 || static_cast<size_t>(sidecar) >= context.num_inbound_sidecars()) {
      return Status::InvalidArgument("value_sidecar out of range", std::to_string(sidecar));
    }
    const BlockSlice block = context.inbound_sidecar_block(sidecar);
    *value = rocksdb::Slice(reinterpret_cast<const char*>(block.slice.data()), block.slice.size());
    return Status::OK();
  }
  if (!has_inline) {
    // kv.proto: exactly one of value / value_sidecar. An empty value is sent as value = "".
    return Status::InvalidArgument("neither value nor value_sidecar set: exactly one is needed");
  }
  *value = rocksdb::Slice(inline_value);
  return Status::OK();
}

}  // namespace

KvService::KvService(KvDb* db, KvServiceOptions options, MetricRegistry* metrics,
                     const KvDbHealth* health)
    : db_(db),
      options_(std::move(options)),
      health_(health),
      values_received_as_sidecars_(
          metrics->FindOrCreateEntity("kv_service", "kv")
              ->FindOrCreateCounter(&METRIC_kv_values_received_as_sidecars_total)),
      values_sent_as_sidecars_(
          metrics->FindOrCreateEntity("kv_service", "kv")
              ->FindOrCreateCounter(&METRIC_kv_values_sent_as_sidecars_total)) {}

KvService::~KvService() { StopStreams(); }

Status KvService::StartStreams(std::weak_ptr<rpc::Messenger> messenger) {
  messenger_ = std::move(messenger);
  return pump_.Start(options_.stream_pump_threads);
}

void KvService::StopStreams() { pump_.Stop(); }

void KvService::EndStreams() { open_streams_.EndAll(); }

void KvService::set_load_hook(std::function<void()> hook) {
  MutexLock lock(hook_mu_);
  load_hook_ = std::move(hook);
}

Status KvService::WritesAllowed() const {
  return health_ == nullptr ? Status::OK() : health_->WritesAllowed();
}

void KvService::set_handler_hook(std::function<void()> hook) {
  MutexLock lock(hook_mu_);
  has_hook_.store(static_cast<bool>(hook));
  hook_ = std::move(hook);
}

void KvService::RunHook() {
  if (!has_hook_.load(std::memory_order_relaxed)) return;
  std::function<void()> hook;
  {
    MutexLock lock(hook_mu_);
    hook = hook_;
  }
  if (hook) hook();
}

void KvService::Put(const PutRequestPB* req, PutResponsePB* /*resp*/, rpc::RpcContext* context) {
  RunHook();
  rocksdb::Slice value;
  Status s = RequestValue(*context, req->has_value(), req->value(), req->has_value_sidecar(),
                          req->value_sidecar(), &value);
  if (!s.ok()) return context->RespondRpcFailure(rpc::ErrorStatusPB::ERROR_INVALID_REQUEST, s);
  s = WritesAllowed();
  if (!s.ok()) return context->RespondFailure(s);
  if (req->has_value_sidecar()) values_received_as_sidecars_->Increment();
  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return context->RespondFailure(db.status());
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  s = FromRocks((*db)->Put(wo, req->key(), value));
  if (!s.ok()) return context->RespondFailure(s);
  context->RespondSuccess();
}

void KvService::Increment(const IncrementRequestPB* req, IncrementResponsePB* resp,
                          rpc::RpcContext* context) {
  RunHook();
  Status s = WritesAllowed();
  if (!s.ok()) return context->RespondFailure(s);
  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return context->RespondFailure(db.status());
  MutexLock lock(increment_mu_);
  std::string old_value;
  rocksdb::Status rs = (*db)->Get(rocksdb::ReadOptions(), req->key(), &old_value);
  int64_t value = 0;
  if (rs.ok()) {
    char* end = nullptr;
    errno = 0;
    value = std::strtoll(old_value.c_str(), &end, 10);
    if (old_value.empty() || errno != 0 || *end != '\0') {
      return context->RespondFailure(
          Status::InvalidArgument("value is not a decimal counter", req->key()));
    }
  } else if (!rs.IsNotFound()) {
    return context->RespondFailure(FromRocks(rs));
  }
  if (__builtin_add_overflow(value, req->delta(), &value)) {
    return context->RespondFailure(Status::InvalidArgument("counter would overflow", req->key()));
  }
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  s = FromRocks((*db)->Put(wo, req->key(), std::to_string(value)));
  if (!s.ok()) return context->RespondFailure(s);
  resp->set_value(value);
  context->RespondSuccess();
}

void KvService::Get(const GetRequestPB* req, GetResponsePB* resp, rpc::RpcContext* context) {
  RunHook();
  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return context->RespondFailure(db.status());
  rocksdb::PinnableSlice value;
  rocksdb::Status rs =
      (*db)->Get(rocksdb::ReadOptions(), (*db)->DefaultColumnFamily(), req->key(), &value);
  if (rs.IsNotFound()) {
    resp->set_found(false);
    return context->RespondSuccess();
  }
  if (!rs.ok()) return context->RespondFailure(FromRocks(rs));
  resp->set_found(true);
  if (value.size() >= options_.sidecar_threshold) {
    // One copy, from RocksDB's pinned block into a Block the response writes from directly.
    BlockRef block = Block::Allocate(value.size());
    memcpy(block->data(), value.data(), value.size());
    resp->set_value_sidecar(
        context->AddOutboundSidecar(BlockSlice{block, Slice(block->data(), value.size())}));
    values_sent_as_sidecars_->Increment();
  } else {
    resp->set_value(value.data(), value.size());
  }
  context->RespondSuccess();
}

void KvService::Delete(const DeleteRequestPB* req, DeleteResponsePB* /*resp*/,
                       rpc::RpcContext* context) {
  RunHook();
  Status s = WritesAllowed();
  if (!s.ok()) return context->RespondFailure(s);
  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return context->RespondFailure(db.status());
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  s = FromRocks((*db)->Delete(wo, req->key()));
  if (!s.ok()) return context->RespondFailure(s);
  context->RespondSuccess();
}

void KvService::Scan(const ScanRequestPB* req, ScanResponsePB* resp, rpc::RpcContext* context) {
  RunHook();
  uint32_t limit = req->limit();
  if (limit == 0 || limit > options_.max_scan_pairs) limit = options_.max_scan_pairs;
  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return context->RespondFailure(db.status());
  std::unique_ptr<rocksdb::Iterator> it((*db)->NewIterator(rocksdb::ReadOptions()));
  const bool bounded = req->has_end_key() && !req->end_key().empty();
  const rocksdb::Slice end(req->end_key());
  size_t bytes = 0;
  for (it->Seek(req->start_key()); it->Valid(); it->Next()) {
    if (bounded && it->key().compare(end) >= 0) break;
    if (static_cast<uint32_t>(resp->pairs_size()) >= limit || bytes >= options_.max_scan_bytes) {
      resp->set_has_more(true);
      break;
    }
    const rocksdb::Slice key = it->key();
    const rocksdb::Slice value = it->value();
    KvPairPB* pair = resp->add_pairs();
    pair->set_key(key.data(), key.size());
    if (value.size() >= options_.sidecar_threshold) {
      BlockRef block = Block::Allocate(value.size());
      memcpy(block->data(), value.data(), value.size());
      pair->set_value_sidecar(
          context->AddOutboundSidecar(BlockSlice{block, Slice(block->data(), value.size())}));
      values_sent_as_sidecars_->Increment();
    } else {
      pair->set_value(value.data(), value.size());
    }
    bytes += key.size() + value.size();
  }
  if (!it->status().ok()) return context->RespondFailure(FromRocks(it->status()));
  context->RespondSuccess();
}

// ---- Streams. Each handler starts its work on the pump and returns at once (the stream, not
// the call's worker, carries it on).

void KvService::ScanStream(const ScanStreamRequestPB* req,
                           rpc::ServerStream<ScanStreamRequestPB, KvChunkPB> stream) {
  RunHook();
  KvRangeSenderOptions opts;
  opts.message_bytes = options_.stream_message_bytes;
  opts.sidecar_threshold = options_.sidecar_threshold;
  opts.limit = req->limit();
  rpc::Stream untyped = stream.untyped();
  const uint64_t id = open_streams_.Add(untyped);
  if (id == 0) return stream.Finish(Status::ServiceUnavailable("the kv-server is shutting down"));
  KvRangeSender::Start(db_, &pump_, untyped, req->range(), opts, &stream_stats_,
                       [this, id, stream](const Status& s) mutable {
                         stream.Finish(s);
                         open_streams_.Remove(id);
                       });
}

void KvService::Load(rpc::ServerStream<KvChunkPB, LoadResponsePB> stream) {
  RunHook();
  KvLoaderOptions opts;
  opts.sync_writes = options_.sync_writes;
  opts.writes_allowed = [this] { return WritesAllowed(); };
  {
    MutexLock lock(hook_mu_);
    opts.before_apply = load_hook_;
  }
  const uint64_t id = open_streams_.Add(stream.untyped());
  if (id == 0) return stream.Finish(Status::ServiceUnavailable("the kv-server is shutting down"));
  opts.on_end = [this, id] { open_streams_.Remove(id); };
  KvLoader::Start(db_, &pump_, std::move(stream), std::move(opts), &stream_stats_);
}

void KvService::CopyRangeTo(const CopyRangeRequestPB* req, CopyRangeResponsePB* resp,
                            rpc::RpcContext* context) {
  RunHook();
  std::shared_ptr<rpc::Messenger> messenger = messenger_.lock();
  if (messenger == nullptr) {
    return context->RespondFailure(Status::ServiceUnavailable("the server is shutting down"));
  }
  KvRangeSenderOptions opts;
  opts.message_bytes = options_.stream_message_bytes;
  opts.sidecar_threshold = options_.sidecar_threshold;
  KvRangeCopy::Start(std::move(messenger), db_, &pump_, req, resp, context, opts, &stream_stats_,
                     &open_streams_);
}

void KvService::Batch(const BatchRequestPB* req, BatchResponsePB* /*resp*/,
                      rpc::RpcContext* context) {
  RunHook();
  rocksdb::WriteBatch batch;
  for (const BatchOpPB& op : req->ops()) {
    rocksdb::Status rs;
    if (op.type() == BatchOpPB::DELETE) {
      rs = batch.Delete(op.key());
    } else {
      rocksdb::Slice value;
      Status s = RequestValue(*context, op.has_value(), op.value(), op.has_value_sidecar(),
                              op.value_sidecar(), &value);
      if (!s.ok()) return context->RespondRpcFailure(rpc::ErrorStatusPB::ERROR_INVALID_REQUEST, s);
      if (op.has_value_sidecar()) {
        values_received_as_sidecars_->Increment();
      }
      rs = batch.Put(op.key(), value);
    }
    if (!rs.ok()) return context->RespondFailure(FromRocks(rs));
  }
  Status s = WritesAllowed();
  if (!s.ok()) return context->RespondFailure(s);
  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return context->RespondFailure(db.status());
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  s = FromRocks((*db)->Write(wo, &batch));
  if (!s.ok()) return context->RespondFailure(s);
  context->RespondSuccess();
}

}  // namespace rrpc::kv
