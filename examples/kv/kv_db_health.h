// KvDbHealth: keeps kv-server honest about its database. RocksDB calls it on a background error
// (a flush or compaction that failed, e.g. out of file descriptors or disk space), after which
// the database refuses writes. It then reports the server degraded (ServerBase::ReportHealth:
// reads still work) or failed (writes stopped), refuses writes itself with a status that says
// why, and tries DB::Resume() every `retry_interval` on a thread of its own until the database
// recovers; then it reports healthy again. An error RocksDB rates fatal or unrecoverable cannot
// be resumed: the server then reports degraded and reopens the database in place (KvDb::Reopen:
// calls meanwhile get ServiceUnavailable, retriable), every `retry_interval` until it opens;
// then healthy again. A reopen that fails reports the server failed until one succeeds.
// Thread-safe. Lifecycle: construct, pass to rocksdb::Options::listeners, open the KvDb,
// Start(db); Stop() before the database closes.
#pragma once

#include <rocksdb/listener.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "rrpc/server/server_base.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc::kv {

class KvDb;

class KvDbHealth final : public rocksdb::EventListener {
 public:
  // `server` outlives this.
  KvDbHealth(ServerBase* server, MonoDelta retry_interval);
  ~KvDbHealth() override;

  // Starts the recovery thread for `db`, which must outlive Stop().
  Status Start(KvDb* db);
  // Joins the recovery thread. Idempotent.
  void Stop();

  // OK while writes may go to the database; otherwise ServiceUnavailable saying why they are
  // refused (the background error) and that recovery is under way.
  Status WritesAllowed() const;

  // rocksdb::EventListener (RocksDB's background threads).
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* error) override;
  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) override;

 private:
  void RecoveryLoop();
  // One attempt: DB::Resume(), or a reopen when RocksDB can't resume. REQUIRES: mu_ not held.
  Status TryRecover(bool resumable);
  // REQUIRES: mu_ held. Clears the error and reports healthy.
  void MarkRecoveredLocked(const std::string& how);

  ServerBase* const server_;
  const MonoDelta retry_interval_;
  KvDb* db_ = nullptr;  // set by Start()
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string error_;      // the background error while the database refuses writes; guarded by mu_
  bool resumable_ = true;  // DB::Resume() can clear error_, else a reopen; guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  // Counts background errors; a recovery clears error_ only if none came while it ran (the
  // reopened database may fail again at once). Guarded by mu_.
  uint64_t error_generation_ = 0;
  std::thread thread_;
};

}  // namespace rrpc::kv
