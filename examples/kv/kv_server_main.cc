// kv-server: the example storage server. A key-value store on RocksDB served over rrpc, with the
// operator web UI. SIGTERM / SIGINT drain it gracefully; every flag may come from --flagfile.
//
//   kv-server --rpc_bind=127.0.0.1:7050 --webserver_bind=127.0.0.1:8050 --data_dir=/srv/kv
#include <fcntl.h>
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "kv/kv_server.h"
#include "rrpc/util/command_line.h"

DEFINE_bool(kv_sync_writes, false,
            "fsync the write-ahead log before acknowledging each write: survives machine "
            "crashes, not only process crashes, at the cost of one fsync per write.");
DEFINE_int32(kv_sidecar_threshold, 4096,
             "Values of at least this many bytes are sent back as RPC sidecars (no protobuf "
             "copy).");
DEFINE_int32(kv_background_pool_workers, 0,
             "Workers of a pool of their own for Scan and Batch (background work); 0: they share "
             "the default pool, where they get --rpc_background_share of the workers while "
             "foreground calls wait.");
DEFINE_string(port_file, "",
              "When set, the bound RPC port is written to this file once the server serves "
              "(for scripts and tests that start it on port 0).");

namespace {

// Written to a temporary name and renamed, so a reader never sees a partial file.
bool WritePortFile(const std::string& path, uint16_t port) {
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  fprintf(f, "%u\n", static_cast<unsigned>(port));
  if (fclose(f) != 0) return false;
  return rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"kv-server [--rpc_bind=HOST:PORT] [--webserver_bind=HOST:PORT] [--data_dir=DIR]",
       "The example storage server: a key-value store on RocksDB, served by rrpc (KvService), "
       "with the web UI. SIGTERM or SIGINT drains the calls in flight, then exits.",
       {"kv/kv_server_main.cc", "server/server_base_flags.cc", "rpc/messenger_flags.cc",
        "rpc/security_flags.cc"}});
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  rrpc::kv::KvServerOptions options;
  options.base = rrpc::ServerBaseOptions::FromFlags("kv-server");
  options.service.sync_writes = FLAGS_kv_sync_writes;
  options.service.sidecar_threshold = static_cast<size_t>(FLAGS_kv_sidecar_threshold);
  options.background_pool_workers = FLAGS_kv_background_pool_workers;
  rrpc::kv::KvServer server(options);
  rrpc::Status s = server.Start();
  if (!s.ok()) {
    LOG(ERROR) << "kv-server: " << s.ToString();
    return 1;
  }
  if (!FLAGS_port_file.empty() && !WritePortFile(FLAGS_port_file, server.rpc_address().port())) {
    PLOG(ERROR) << "writing " << FLAGS_port_file;
    return 1;
  }
  s = server.base()->RunUntilSignalled();
  if (!s.ok()) {
    LOG(ERROR) << "kv-server: " << s.ToString();
    return 1;
  }
  server.Shutdown();
  LOG(INFO) << "kv-server: bye";
  return 0;
}
