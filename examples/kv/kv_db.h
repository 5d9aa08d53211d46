// KvDb: kv-server's handle on its RocksDB database, which can be closed and opened again in place
// while the server runs (after an error RocksDB cannot resume from, e.g. a write-ahead log write
// that failed for good). Every call takes a Ref for as long as it uses the database; Reopen()
// refuses new calls (ServiceUnavailable: retry), waits for the calls in flight to drop their Refs,
// closes the database and opens it again from its files.
//
// Thread-safety: Use() from any thread, concurrently (the worker threads); Open(), Reopen() and
// Close() from one controlling thread at a time (KvServer's start and shutdown, KvDbHealth's
// recovery thread). Lock order: a Ref's shared lock is taken after no other lock of kv's.
#pragma once

#include <rocksdb/options.h>

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>

#include "rrpc/util/status.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace rrpc::kv {

class KvDb {
 public:
  KvDb(std::string path, rocksdb::Options options);
  ~KvDb();  // Closes.
  KvDb(const KvDb&) = delete;
  KvDb& operator=(const KvDb&) = delete;

  // Opens (or creates) the database.
  Status Open();
  // Closes the database; later Use() calls are refused. Idempotent.
  void Close();
  // Closes the database and opens it again; calls meanwhile are refused. Returns when the new
  // database serves, or with why it could not be opened (it stays closed; call again).
  Status Reopen();

  // The database for one call, held open (shared) while the Ref lives. Keep a Ref only for the
  // call's use of the database: a reopen waits for every Ref.
  class Ref {
   public:
    rocksdb::DB* operator->() const { return db_; }
    rocksdb::DB* get() const { return db_; }

   private:
    friend class KvDb;
    Ref(std::shared_lock<std::shared_mutex> lock, rocksdb::DB* db)
        : lock_(std::move(lock)), db_(db) {}
    std::shared_lock<std::shared_mutex> lock_;
    rocksdb::DB* db_;
  };
  // ServiceUnavailable (retriable) while the database reopens or after a failed reopen.
  Result<Ref> Use();

  // How many times the database was reopened.
  int64_t reopens() const { return reopens_.load(); }

 private:
  const std::string path_;
  const rocksdb::Options options_;
  // Exclusive: open, close, reopen. Shared: each call's Ref. Guards db_.
  std::shared_mutex mu_;
  std::unique_ptr<rocksdb::DB> db_;
  // Set while a reopen waits for or holds mu_: new calls are refused instead of queueing behind
  // it (a writer waiting on a shared_mutex may otherwise starve or stall readers).
  std::atomic<bool> reopening_{false};
  std::atomic<int64_t> reopens_{0};
};

}  // namespace rrpc::kv
