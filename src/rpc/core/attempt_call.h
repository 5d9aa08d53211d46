// NewAttemptCall: the attempt engine's first step (core/attempt_engine.h): one attempt of a call,
// made, serialized and attached to its controller's Cancel(). Every client call takes it: a Proxy
// to one address (for a plain call it is the whole client-side set-up) and a cluster channel's
// attempts. Inline, so that a plain call pays no extra call for it; the rare paths (a retry's
// count, a call cancelled before it left) are out of line (attempt_call.cc). Caller's thread.
#pragma once

#include <glog/logging.h>
#include <google/protobuf/message.h>

#include <utility>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/remote_method.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/response_callback.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/ref_counted.h"

namespace rrpc::rpc {

// Finishes `call`, cancelled before it was sent, with Status::Aborted.
void FailAttemptCancelledBeforeSend(OutboundCall* call);
// Counts `call`, a retry, in its method's client metrics (client_retries_total).
void CountRetry(const OutboundCall& call);

// Makes and serializes one attempt of a call to `method` and attaches it to the controller's
// Cancel(): the OutboundCall to queue (or write), or nullptr when it has failed already and its
// callback has run (the request does not serialize, or the call was cancelled before it left).
// `attempt_deadline`: the attempt's own (AttemptSeries::AttemptDeadline); `observer`, if any,
// hears of its end. A tracked call's attempt (its controller holds a request id) carries the id
// and reports its connection.
inline scoped_refptr<OutboundCall> NewAttemptCall(
    Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
    const google::protobuf::Message& request, google::protobuf::Message* response,
    RpcController* controller, ResponseCallback&& callback,
    MonoTime attempt_deadline = MonoTime::Max(), CallObserver* observer = nullptr) {
  CHECK(!controller->finished()) << "RpcController reused without Reset()";
  scoped_refptr<OutboundCall> call(
      new OutboundCall(std::move(method), response, controller, std::move(callback)));
  if (observer != nullptr) call->set_observer(scoped_refptr<CallObserver>(observer));
  const RequestTracker* tracker = nullptr;
  if (controller->request_seq_no() != 0) {  // a tracked call
    tracker = MessengerInternals::request_tracker(*messenger);
    call->set_report_connection();  // its server's EXACTLY_ONCE decides whether to retry
  }
  const Compression codec = controller->has_compression() ? controller->compression()
                                                          : messenger->options().compression.codec;
  if (codec != Compression::kNone) {
    call->WantCompression(codec, &messenger->options().compression,
                          MessengerInternals::metrics(*messenger));
  }
  Status s = call->Serialize(request, MessengerInternals::NextCallId(messenger),
                             messenger->options().max_message_size, attempt_deadline, tracker);
  if (!s.ok()) {
    call->FailBeforeSend(s);
    return nullptr;
  }
  if (!RpcControllerInternal::AttachCall(controller, call.get())) {
    FailAttemptCancelledBeforeSend(call.get());
    return nullptr;
  }
  if (controller->attempts() > 1) CountRetry(*call);
  return call;
}

}  // namespace rrpc::rpc
