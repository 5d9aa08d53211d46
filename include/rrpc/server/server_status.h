// ServerStatusService: answers GetStatus (version, uptime, name, flags, health) and GetMetrics
// (Prometheus text) for a
// ServerBase, which registers it on every server. Handlers run on worker threads and are
// thread-safe; the ServerBase must outlive the service (it owns it through its messenger).
#pragma once

#include "rrpc/server/server_status.rrpc.h"

namespace rrpc {

class ServerBase;

class ServerStatusServiceImpl : public server::ServerStatusServiceIf {
 public:
  explicit ServerStatusServiceImpl(const ServerBase* server) : server_(server) {}

  void GetStatus(const server::GetStatusRequestPB* req, server::GetStatusResponsePB* resp,
                 rpc::RpcContext* context) override;
  void GetMetrics(const server::GetMetricsRequestPB* req, server::GetMetricsResponsePB* resp,
                  rpc::RpcContext* context) override;

 private:
  const ServerBase* const server_;
};

// rrpc's version string ("0.1.0").
const char* RrpcVersion();

}  // namespace rrpc
