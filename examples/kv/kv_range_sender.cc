#include "kv/kv_range_sender.h"

#include <rocksdb/db.h>

#include <cstring>
#include <utility>

#include "kv/kv_db.h"
#include "kv/kv_stream_pump.h"
#include "kv/kv_stream_stats.h"

namespace rrpc::kv {

void KvRangeSender::Start(KvDb* db, KvStreamPump* pump, rpc::Stream stream, const KeyRangePB& range,
                          KvRangeSenderOptions options, KvStreamStats* stats, Done done) {
  auto sender = std::make_shared<KvRangeSender>(db, pump, std::move(stream), range,
                                                std::move(options), stats, std::move(done));
  pump->Submit([sender] { sender->Step(); });
}

KvRangeSender::KvRangeSender(KvDb* db, KvStreamPump* pump, rpc::Stream stream,
                             const KeyRangePB& range, KvRangeSenderOptions options,
                             KvStreamStats* stats, Done done)
    : db_(db),
      pump_(pump),
      stream_(std::move(stream)),
      end_(range.end_key()),
      options_(std::move(options)),
      stats_(stats),
      done_(std::move(done)),
      resume_key_(range.start_key()) {
  stats_->open++;
}

KvRangeSender::~KvRangeSender() { stats_->open--; }

void KvRangeSender::Complete(const Status& status) {
  if (done_called_) return;
  done_called_ = true;
  Done done = std::move(done_);
  done(status);
}

bool KvRangeSender::SendPending() {
  size_t bytes = pending_.ByteSizeLong();
  for (const BlockSlice& s : pending_sidecars_) bytes += s.slice.size();
  // TryWrite takes the sidecars only when it queues the message.
  std::vector<BlockSlice> sidecars = pending_sidecars_;
  switch (stream_.TryWrite(pending_, std::move(sidecars))) {
    case rpc::StreamWrite::kQueued:
      stats_->message_bytes_queued += bytes;
      has_pending_ = false;
      pending_.Clear();
      pending_sidecars_.clear();
      return true;
    case rpc::StreamWrite::kFull:
      WaitForRoom();
      return false;
    case rpc::StreamWrite::kClosed: {
      Status s = stream_.status();
      Complete(s.ok() ? Status::Aborted("the stream was closed before the range was sent") : s);
      return false;
    }
  }
  return false;
}

void KvRangeSender::WaitForRoom() {
  stats_->waits_for_room++;
  stats_->senders_waiting++;
  // The callback runs on a reactor (or here, when room came meanwhile): it only submits.
  stream_.OnWritable([self = shared_from_this()] {
    self->stats_->senders_waiting--;
    self->pump_->Submit([self] { self->Step(); });
  });
}

void KvRangeSender::Step() {
  if (has_pending_ && !SendPending()) return;
  if (options_.limit != 0 && pairs_sent_ >= options_.limit) return Complete(Status::OK());

  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return Complete(db.status());
  rocksdb::ReadOptions ro;
  const rocksdb::Slice upper(end_);
  if (!end_.empty()) ro.iterate_upper_bound = &upper;
  // Not cached: a scan of a large range would push the point reads' blocks out.
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it((*db)->NewIterator(ro));
  it->Seek(resume_key_);
  if (resume_after_ && it->Valid() && it->key() == rocksdb::Slice(resume_key_)) it->Next();

  size_t step_read = 0;
  while (true) {
    size_t message_read = 0;
    while (it->Valid() && message_read < options_.message_bytes &&
           (options_.limit == 0 || pairs_sent_ < options_.limit)) {
      const rocksdb::Slice key = it->key();
      const rocksdb::Slice value = it->value();
      KvPairPB* pair = pending_.add_pairs();
      pair->set_key(key.data(), key.size());
      if (value.size() >= options_.sidecar_threshold) {
        BlockRef block = Block::Allocate(value.size());
        memcpy(block->data(), value.data(), value.size());
        pair->set_value_sidecar(static_cast<int32_t>(pending_sidecars_.size()));
        pending_sidecars_.push_back(BlockSlice{block, Slice(block->data(), value.size())});
      } else {
        pair->set_value(value.data(), value.size());
      }
      message_read += key.size() + value.size();
      pairs_sent_++;
      it->Next();
    }
    if (!it->status().ok()) return Complete(Status::IOError(it->status().ToString()));
    if (pending_.pairs_size() == 0) return Complete(Status::OK());  // the range is done
    stats_->pairs_read += static_cast<uint64_t>(pending_.pairs_size());
    stats_->bytes_read += message_read;
    resume_key_ = pending_.pairs(pending_.pairs_size() - 1).key();
    resume_after_ = true;
    has_pending_ = true;
    step_read += message_read;
    if (!SendPending()) return;  // waits for room (iterator and Ref dropped) or done
    if (step_read >= options_.step_bytes) {
      // Yield the pump thread; the next step seeks after the last key sent.
      pump_->Submit([self = shared_from_this()] { self->Step(); });
      return;
    }
  }
}

}  // namespace rrpc::kv
