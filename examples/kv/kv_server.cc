#include "kv/kv_server.h"

#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

namespace rrpc::kv {

namespace {

constexpr char kBackgroundPool[] = "kv-background";

ServerBaseOptions WithPools(const KvServerOptions& options) {
  ServerBaseOptions base = options.base;
  if (options.background_pool_workers > 0) {
    rpc::ServicePoolConfig pool;
    pool.name = kBackgroundPool;
    pool.num_workers = options.background_pool_workers;
    pool.queue_length = base.messenger.service_queue_length;
    base.messenger.service_pools.push_back(pool);
  }
  return base;
}

}  // namespace

KvServer::KvServer(KvServerOptions options)
    : options_(std::move(options)),
      data_dir_(options_.base.data_dir.empty() ? "kv-data" : options_.base.data_dir),
      base_(WithPools(options_)) {}

KvServer::~KvServer() { Shutdown(); }

Status KvServer::Start() {
  if (db_) return Status::IllegalState("kv server already started");
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  // Workers write concurrently; let them share one write group.
  db_options.enable_pipelined_write = true;
  if (options_.db_env != nullptr) db_options.env = options_.db_env;
  db_health_ = std::make_shared<KvDbHealth>(&base_, options_.db_recovery_interval);
  db_options.listeners.push_back(db_health_);
  db_ = std::make_unique<KvDb>(data_dir_, db_options);
  Status s = db_->Open();
  if (!s.ok()) {
    db_.reset();
    return s;
  }
  RRPC_RETURN_NOT_OK(base_.Init());  // creates the metric registry the service counts in
  RRPC_RETURN_NOT_OK(db_health_->Start(db_.get()));
  auto service = std::make_unique<KvService>(db_.get(), options_.service, base_.metric_registry(),
                                             db_health_.get());
  service_ = service.get();
  if (options_.background_pool_workers > 0) {
    for (const char* method : {"Scan", "Batch", "ScanStream", "Load", "CopyRangeTo"}) {
      RRPC_RETURN_NOT_OK(service->SetMethodPool(method, kBackgroundPool));
    }
  }
  RRPC_RETURN_NOT_OK(service->StartStreams(base_.messenger()));
  RRPC_RETURN_NOT_OK(base_.RegisterService(std::move(service)));
  RRPC_RETURN_NOT_OK(base_.Start());
  LOG(INFO) << "kv server: data in " << data_dir_;
  return Status::OK();
}

void KvServer::Shutdown() {
  // Streams first: the drain waits for every call, and a stream whose reader stalled would hold
  // it for the whole shutdown timeout. Their clients get ServiceUnavailable (retriable).
  if (service_ != nullptr) service_->EndStreams();
  base_.Shutdown();
  if (db_health_) db_health_->Stop();
  // The messenger stopped serving: streams still open end, then nothing uses the database.
  if (service_ != nullptr) service_->StopStreams();
  // Workers are joined: no handler uses the database any more. Closing syncs what was
  // acknowledged into its files.
  if (db_) db_->Close();
}

}  // namespace rrpc::kv
