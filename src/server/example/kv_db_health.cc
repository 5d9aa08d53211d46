#include "server/example/kv_db_health.h"

#include <glog/logging.h>
#include <rocksdb/db.h>

#include <chrono>

#include "util/thread.h"

namespace rrpc::kv {

namespace {
constexpr char kComponent[] = "rocksdb";
}  // namespace

KvDbHealth::KvDbHealth(ServerBase* server, MonoDelta retry_interval)
    : server_(server), retry_interval_(retry_interval) {}

KvDbHealth::~KvDbHealth() { Stop(); }

Status KvDbHealth::Start(rocksdb::DB* db) {
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
  // error) cannot be resumed at all: only reopening the database helps.
  const rocksdb::Status::Severity severity = error->severity();
  const bool writes_stop = severity > rocksdb::Status::Severity::kSoftError;
  const bool resumable = severity <= rocksdb::Status::Severity::kHardError;
  std::string detail = "background error: " + error->ToString();
  if (!resumable) detail += " (not resumable: restart the server)";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (writes_stop) error_ = error->ToString();
    resumable_ = resumable;
  }
  server_->ReportHealth(
      kComponent,
      writes_stop ? ServerBase::HealthState::kFailed : ServerBase::HealthState::kDegraded, detail);
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

void KvDbHealth::RecoveryLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (error_.empty() || !resumable_) {
      cv_.wait(lock, [this] { return stopping_ || (!error_.empty() && resumable_); });
      continue;
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(retry_interval_.ToNanoseconds()),
                 [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    rocksdb::Status rs = db_->Resume();  // may take a while: a flush of the memtables
    lock.lock();
    if (rs.ok()) {
      MarkRecoveredLocked("after DB::Resume()");
    } else {
      VLOG(1) << "DB::Resume() failed, retrying: " << rs.ToString();
    }
  }
}

}  // namespace rrpc::kv
