// KvServer: the example storage server: a RocksDB database in options.base.data_dir served by
// KvService through a ServerBase (RPC, web UI, status service, graceful drain). kv-server's main,
// the tests and kv-bench all run it. Start() and Shutdown() from one controlling thread
// (Shutdown() is idempotent; the destructor calls it).
//
//   KvServerOptions opts;
//   opts.base = ServerBaseOptions::FromFlags("kv-server");
//   KvServer server(opts);
//   RRPC_RETURN_NOT_OK(server.Start());
//   server.base()->RunUntilSignalled();
#pragma once

#include <memory>
#include <string>

#include "kv/kv_db.h"
#include "kv/kv_db_health.h"
#include "kv/kv_service.h"
#include "rrpc/server/server_base.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace rrpc::kv {

struct KvServerOptions {
  // base.data_dir empty: "kv-data" under the working directory.
  ServerBaseOptions base;
  KvServiceOptions service;
  // After a RocksDB background error (writes refused), how often to try DB::Resume().
  MonoDelta db_recovery_interval = MonoDelta::FromSeconds(1);
  // The RocksDB environment (tests inject failing file systems); nullptr: the default.
  rocksdb::Env* db_env = nullptr;
  // > 0: Scan and Batch (the background methods) run in a pool of their own, "kv-background",
  // with this many workers, so they never take a foreground worker (docs/isolation.md). 0: they
  // share the default pool with Get, Put and Increment, as its background class.
  int background_pool_workers = 0;
};

class KvServer {
 public:
  explicit KvServer(KvServerOptions options);
  ~KvServer();
  KvServer(const KvServer&) = delete;
  KvServer& operator=(const KvServer&) = delete;

  // Opens (or creates) the database, registers KvService and starts serving.
  Status Start();
  // Drains the RPC server (ServerBase::Shutdown), then closes the database so that everything
  // acknowledged is in its files.
  void Shutdown();

  ServerBase* base() { return &base_; }
  // The service (owned by the messenger); valid from Start() until destruction.
  KvService* service() { return service_; }
  const Sockaddr& rpc_address() const { return base_.rpc_address(); }
  const std::string& data_dir() const { return data_dir_; }
  // The database handle (tests force flushes and reopens through it); valid from Start() until
  // destruction.
  KvDb* db() const { return db_.get(); }

 private:
  const KvServerOptions options_;
  std::string data_dir_;
  // Declared before base_: the messenger (and the service using the database) goes first.
  std::unique_ptr<KvDb> db_;
  // Listens to the database (a listener RocksDB shares); stopped before the database closes.
  std::shared_ptr<KvDbHealth> db_health_;
  ServerBase base_;
  KvService* service_ = nullptr;
};

}  // namespace rrpc::kv
