#include "rrpc/server/server_status.h"

#include <gflags/gflags.h>

#include <algorithm>
#include <vector>

#include "rrpc/rpc/rpc_context.h"
#include "rrpc/server/server_base.h"
#include "rrpc/util/command_line.h"
#include "util/metrics/metric_registry.h"
#include "util/metrics/prometheus_writer.h"

#ifndef RRPC_VERSION
#define RRPC_VERSION "unknown"
#endif

namespace rrpc {

const char* RrpcVersion() { return RRPC_VERSION; }

void ServerStatusServiceImpl::GetStatus(const server::GetStatusRequestPB* /*req*/,
                                        server::GetStatusResponsePB* resp,
                                        rpc::RpcContext* context) {
  resp->set_version(RrpcVersion());
  resp->set_uptime_seconds((MonoTime::Now() - server_->start_time()).ToSeconds());
  resp->set_server_name(server_->name());
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);  // sorted by name
  for (const auto& flag : flags) {
    server::ServerFlagPB* pb = resp->add_flags();
    pb->set_name(flag.name);
    // As /varz: a secret's value is not for whoever can reach the port.
    const bool hide = IsSensitiveFlagName(flag.name) && !flag.current_value.empty();
    pb->set_value(hide ? kRedactedFlagValue : flag.current_value);
  }
  const Status health = server_->Health();
  resp->set_healthy(health.ok());
  const std::string note = server_->HealthNote();
  resp->set_health(health.ok() ? (note.empty() ? "OK" : note) : health.message());
  context->RespondSuccess();
}

void ServerStatusServiceImpl::GetMetrics(const server::GetMetricsRequestPB* /*req*/,
                                         server::GetMetricsResponsePB* resp,
                                         rpc::RpcContext* context) {
  MetricRegistry* registry = server_->metric_registry();
  if (registry == nullptr) {
    context->RespondFailure(Status::NotFound("this server keeps no metrics"));
    return;
  }
  resp->set_prometheus_text(FormatPrometheus(registry->TakeSnapshot()));
  context->RespondSuccess();
}

}  // namespace rrpc
