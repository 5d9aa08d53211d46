#include "rpc/core/stream_open.h"

#include <memory>
#include <utility>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rpc/core/stream_state.h"
#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rpc {

Stream OpenClientStream(Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
                        const google::protobuf::Message* request,
                        const google::protobuf::Message* response_prototype,
                        const StreamOptions& options) {
  const MessengerOptions& mo = messenger->options();
  const size_t window = options.receive_window != 0 ? options.receive_window : mo.stream_window;
  auto state =
      std::make_shared<StreamState>(StreamState::Side::kClient, window, mo.max_message_size);
  Stream handle(state);
  RpcController* controller = state->controller();
  if (options.timeout > MonoDelta()) controller->set_timeout(options.timeout);
  if (options.priority.has_value()) controller->set_priority(*options.priority);
  state->SetCompression(options.compression.value_or(mo.compression.codec), mo.compression,
                        MessengerInternals::metrics(*messenger));
  state->set_peer_reads_compression(method->peer_reads_compression());
  std::unique_ptr<google::protobuf::Message> response(
      response_prototype != nullptr ? response_prototype->New() : new StreamEmptyPB());
  google::protobuf::Message* response_ptr = response.get();
  scoped_refptr<OutboundCall> call(new OutboundCall(std::move(method), response_ptr, controller,
                                                    [state] { state->OnCallFinished(); }));
  call->set_stream(state);
  const int32_t call_id = MessengerInternals::NextCallId(messenger);
  state->SetClientCall(call_id, std::move(response));
  Status s = call->Serialize(request != nullptr ? *request : StreamEmptyPB::default_instance(),
                             call_id, mo.max_message_size);
  if (!s.ok()) {
    call->FailBeforeSend(s);
    return handle;
  }
  if (!RpcControllerInternal::AttachCall(controller, call.get())) {
    call->FailBeforeSend(Status::Aborted("stream cancelled before it opened"));
    return handle;
  }
  state->SetDeadline(call->deadline());
  MessengerInternals::QueueOutboundCall(messenger, std::move(call));
  return handle;
}

Stream FailedStream(const Status& status) {
  auto state = std::make_shared<StreamState>(StreamState::Side::kClient, 0, 0);
  state->FailBeforeOpen(status);
  return Stream(state);
}

}  // namespace rrpc::rpc
