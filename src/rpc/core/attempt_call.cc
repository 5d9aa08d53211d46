#include "rpc/core/attempt_call.h"

#include <string>

#include "rpc/observe/rpc_metrics.h"

namespace rrpc::rpc {

void FailAttemptCancelledBeforeSend(OutboundCall* call) {
  call->FailBeforeSend(
      Status::Aborted("call " + call->method_name() + " cancelled before it was sent"));
}

void CountRetry(const OutboundCall& call) {
  ClientMethodMetrics* metrics = call.remote_method()->metrics();
  if (metrics != nullptr) metrics->retries->Increment();
}

}  // namespace rrpc::rpc
