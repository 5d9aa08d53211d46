#include "kv/kv_db_health.h"

#include <glog/logging.h>
#include <rocksdb/db.h>

#include <chrono>

#include "kv/kv_db.h"
#include "util/thread.h"

namespace rrpc::kv {

namespace {
constexpr char kComponent[] = "rocksdb";
}  // namespace

KvDbHealth::KvDbHealth(ServerBase* server, MonoDelta retry_interval)
    : server_(server), retry_interval_(retry_interval) {}

KvDbHealth::~KvDbHealth() { Stop(); }

Status KvDbHealth::Start(KvDb* db) {
  db_ = db;
  // An rrpc thread: it blocks the process signals, which go to the thread that waits for them
  // (ServerBase::RunUntilSignalled), not to this one.
  RRPC_ASSIGN_OR_RETURN(thread_, StartThread("kv", "kv-db-recovery", [this] { RecoveryLoop(); }));
  return Status::OK();
}

void KvDbHealth::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status KvDbHealth::WritesAllowed() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) return Status::OK();
  return Status::ServiceUnavailable(
      "writes refused while the database recovers from a background error", error_);
}

void KvDbHealth::OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* error) {
  if (error == nullptr || error->ok()) return;
  // A soft error leaves the database writable; a hard one stops writes until a resume; worse
  // ones (fatal, unrecoverable: RocksDB's call, e.g. a failed flush of a non-retryable I/O
  // error) cannot be resumed at all: only reopening the database helps, and the recovery
  // thread does that (degraded meanwhile: reads and writes are refused for a moment, not for
  // good).
  const rocksdb::Status::Severity severity = error->severity();
  const bool writes_stop = severity > rocksdb::Status::Severity::kSoftError;
  const bool resumable = severity <= rocksdb::Status::Severity::kHardError;
  std::string detail = "background error: " + error->ToString();
  if (!resumable) detail += " (not resumable: reopening the database)";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (writes_stop) error_ = error->ToString();
    resumable_ = resumable;
    error_generation_++;
  }
  const bool failed = writes_stop && resumable;  // a reopen is under way otherwise
  server_->ReportHealth(
      kComponent, failed ? ServerBase::HealthState::kFailed : ServerBase::HealthState::kDegraded,
      detail);
  cv_.notify_all();
}

void KvDbHealth::OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) {
  // RocksDB's own recovery (it retries some errors itself) ended.
  if (!info.new_bg_error.ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  MarkRecoveredLocked("by RocksDB");
}

void KvDbHealth::MarkRecoveredLocked(const std::string& how) {
  if (!error_.empty()) LOG(INFO) << "database recovered " << how << " from: " << error_;
  error_.clear();
  server_->ReportHealth(kComponent, ServerBase::HealthState::kOk, "");
}

Status KvDbHealth::TryRecover(bool resumable) {
  if (!resumable) return db_->Reopen();  // waits for the calls in flight; refuses new ones
  Result<KvDb::Ref> db = db_->Use();
  if (!db.ok()) return db.status();
  rocksdb::Status rs = (*db)->Resume();  // may take a while: a flush of the memtables
  return rs.ok() ? Status::OK() : Status::IOError("DB::Resume()", rs.ToString());
}

void KvDbHealth::RecoveryLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (error_.empty()) {
      cv_.wait(lock, [this] { return stopping_ || !error_.empty(); });
      continue;
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(retry_interval_.ToNanoseconds()),
                 [this] { return stopping_; });
    if (stopping_) break;
    const bool resumable = resumable_;
    const std::string error = error_;
    const uint64_t generation = error_generation_;
    lock.unlock();
    Status s = TryRecover(resumable);
    lock.lock();
    if (s.ok() && error_generation_ != generation) {
      continue;  // a new error came meanwhile (e.g. from the reopened database): recover again
    }
    if (s.ok()) {
      // A fresh database has no background error; a resumed one cleared it.
      resumable_ = true;
      MarkRecoveredLocked(resumable ? "after DB::Resume()" : "by reopening it");
    } else if (resumable) {
      VLOG(1) << "DB::Resume() failed, retrying: " << s.ToString();
    } else {
      LOG(WARNING) << "reopening the database failed, retrying: " << s.ToString();
      server_->ReportHealth(kComponent, ServerBase::HealthState::kFailed,
                            "background error: " + error + "; reopening the database failed (" +
                                s.ToString() + "), retrying");
    }
  }
}

}  // namespace rrpc::kv
