#include "kv/kv_db.h"

#include <glog/logging.h>
#include <rocksdb/db.h>

namespace rrpc::kv {

KvDb::KvDb(std::string path, rocksdb::Options options)
    : path_(std::move(path)), options_(std::move(options)) {}

KvDb::~KvDb() { Close(); }

Status KvDb::Open() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (db_ != nullptr) return Status::IllegalState("database already open", path_);
  rocksdb::DB* db = nullptr;
  rocksdb::Status rs = rocksdb::DB::Open(options_, path_, &db);
  if (!rs.ok()) return Status::IOError("opening the database", rs.ToString());
  db_.reset(db);
  return Status::OK();
}

void KvDb::Close() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (db_ == nullptr) return;
  // No Ref is held: everything acknowledged is in the write-ahead log; Close() syncs it.
  rocksdb::Status rs = db_->Close();
  if (!rs.ok()) LOG(WARNING) << "closing the database: " << rs.ToString();
  db_.reset();
}

Status KvDb::Reopen() {
  reopening_ = true;
  Status result;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);  // waits for the calls in flight
    if (db_ != nullptr) {
      // A database in an unrecoverable error state may fail to close cleanly; what was
      // acknowledged is in its write-ahead log, which the open below replays.
      rocksdb::Status rs = db_->Close();
      if (!rs.ok()) LOG(WARNING) << "closing the database to reopen it: " << rs.ToString();
      db_.reset();
    }
    rocksdb::DB* db = nullptr;
    rocksdb::Status rs = rocksdb::DB::Open(options_, path_, &db);
    if (rs.ok()) {
      db_.reset(db);
      reopens_++;
      LOG(INFO) << "database reopened: " << path_;
    } else {
      result = Status::IOError("reopening the database", rs.ToString());
    }
  }
  reopening_ = false;
  return result;
}

Result<KvDb::Ref> KvDb::Use() {
  if (reopening_.load()) {
    return Status::ServiceUnavailable("the database is reopening after an unrecoverable error",
                                      "retry");
  }
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (db_ == nullptr) {
    return Status::ServiceUnavailable(
        "the database is closed (a reopen failed or the server stops)", "retry");
  }
  rocksdb::DB* db = db_.get();
  return Ref(std::move(lock), db);
}

}  // namespace rrpc::kv
