#include "kv/kv_loader.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <utility>

#include "kv/kv_db.h"
#include "kv/kv_stream_pump.h"
#include "kv/kv_stream_stats.h"

namespace rrpc::kv {

void KvLoader::Start(KvDb* db, KvStreamPump* pump, LoadStream stream, KvLoaderOptions options,
                     KvStreamStats* stats) {
  auto loader = std::make_shared<KvLoader>(db, pump, std::move(stream), std::move(options), stats);
  pump->Submit([loader] { loader->Step(); });
}

KvLoader::KvLoader(KvDb* db, KvStreamPump* pump, LoadStream stream, KvLoaderOptions options,
                   KvStreamStats* stats)
    : db_(db),
      pump_(pump),
      stream_(std::move(stream)),
      options_(std::move(options)),
      stats_(stats) {
  stats_->open++;
}

KvLoader::~KvLoader() {
  stats_->open--;
  if (options_.on_end) options_.on_end();
}

Status KvLoader::Apply(const KvChunkPB& chunk, const std::vector<BlockSlice>& sidecars) {
  rocksdb::WriteBatch batch;
  uint64_t bytes = 0;
  for (const KvPairPB& pair : chunk.pairs()) {
    rocksdb::Slice value;
    if (pair.has_value_sidecar()) {
      if (pair.has_value()) return Status::InvalidArgument("both value and value_sidecar set");
      const int32_t i = pair.value_sidecar();
      if (i < 0 || static_cast<size_t>(i) >= sidecars.size()) {
        return Status::InvalidArgument("value_sidecar out of range", std::to_string(i));
      }
      const Slice& s = sidecars[i].slice;
      value = rocksdb::Slice(reinterpret_cast<const char*>(s.data()), s.size());
    } else {
      value = rocksdb::Slice(pair.value());
    }
    rocksdb::Status rs = batch.Put(pair.key(), value);
    if (!rs.ok()) return Status::InvalidArgument(rs.ToString());
    bytes += pair.key().size() + value.size();
  }
  if (options_.writes_allowed) RRPC_RETURN_NOT_OK(options_.writes_allowed());
  Result<KvDb::Ref> db = db_->Use();
  RRPC_RETURN_NOT_OK(db.status());
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  rocksdb::Status rs = (*db)->Write(wo, &batch);
  if (!rs.ok()) return Status::IOError(rs.ToString());
  pairs_ += static_cast<uint64_t>(chunk.pairs_size());
  bytes_ += bytes;
  stats_->pairs_loaded += static_cast<uint64_t>(chunk.pairs_size());
  stats_->bytes_loaded += bytes;
  return Status::OK();
}

void KvLoader::Step() {
  size_t step_bytes = 0;
  KvChunkPB chunk;
  std::vector<BlockSlice> sidecars;
  while (step_bytes < options_.step_bytes) {
    Result<rpc::StreamRead> r = stream_.TryRead(&chunk, &sidecars);
    if (!r.ok()) return;  // did not parse: TryRead finished the stream with the error
    switch (*r) {
      case rpc::StreamRead::kEmpty:
        // The callback runs on a reactor (or here, when a message came meanwhile).
        stream_.OnReadable(
            [self = shared_from_this()] { self->pump_->Submit([self] { self->Step(); }); });
        return;
      case rpc::StreamRead::kEnd: {
        if (!stream_.status().ok()) return;  // cancelled or lost: nobody to answer
        LoadResponsePB resp;
        resp.set_pairs(pairs_);
        resp.set_bytes(bytes_);
        stream_.Finish(resp);
        return;
      }
      case rpc::StreamRead::kMessage:
        break;
    }
    if (options_.before_apply) options_.before_apply();
    Status s = Apply(chunk, sidecars);
    if (!s.ok()) return stream_.Finish(s);
    step_bytes += chunk.ByteSizeLong();
    for (const BlockSlice& b : sidecars) step_bytes += b.slice.size();
    chunk.Clear();
    sidecars.clear();
  }
  pump_->Submit([self = shared_from_this()] { self->Step(); });
}

}  // namespace rrpc::kv
