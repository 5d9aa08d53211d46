#include "rpc/core/stream_open.h"

#include <memory>
#include <utility>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rpc/core/stream_state.h"
#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rpc {

namespace {
// Sends `state`'s opening call to `method`: a new call id, the request serialized, the call
// queued. A failure before it leaves finishes the call here (the stream's OnCallFinished).
// `first_response`: the first open's response message (the stream keeps it); nullptr when the
// stream moves (ReopenClientStream), which reuses it.
void SendOpeningCall(Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
                     const std::shared_ptr<StreamState>& state,
                     const google::protobuf::Message* request,
                     std::unique_ptr<google::protobuf::Message> first_response) {
  const bool reopen = first_response == nullptr;
  const MessengerOptions& mo = messenger->options();
  RpcController* controller = state->controller();
  state->set_peer_reads_compression(method->peer_reads_compression());
  google::protobuf::Message* response = reopen ? state->final_response() : first_response.get();
  response->Clear();
  scoped_refptr<OutboundCall> call(new OutboundCall(std::move(method), response, controller,
                                                    [state] { state->OnCallFinished(); }));
  call->set_stream(state);
  const int32_t call_id = MessengerInternals::NextCallId(messenger);
  if (!reopen) state->SetClientCall(call_id, std::move(first_response));
  Status s = call->Serialize(request != nullptr ? *request : StreamEmptyPB::default_instance(),
                             call_id, mo.max_message_size);
  if (reopen) state->ReopenAs(call_id);
  if (!s.ok()) {
    call->FailBeforeSend(s);
    return;
  }
  if (!RpcControllerInternal::AttachCall(controller, call.get())) {
    call->FailBeforeSend(Status::Aborted("stream cancelled before it opened"));
    return;
  }
  if (!reopen) state->SetDeadline(call->deadline());
  MessengerInternals::QueueOutboundCall(messenger, std::move(call));
}
}  // namespace

Stream OpenClientStream(Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
                        const google::protobuf::Message* request,
                        const google::protobuf::Message* response_prototype,
                        const StreamOptions& options, std::unique_ptr<StreamReopener> reopener) {
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
  if (reopener != nullptr) state->SetReopener(std::move(reopener));
  std::unique_ptr<google::protobuf::Message> response(
      response_prototype != nullptr ? response_prototype->New() : new StreamEmptyPB());
  SendOpeningCall(messenger, std::move(method), state, request, std::move(response));
  return handle;
}

void ReopenClientStream(Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
                        const std::shared_ptr<StreamState>& stream,
                        const google::protobuf::Message* request) {
  SendOpeningCall(messenger, std::move(method), stream, request, nullptr);
}

Stream FailedStream(const Status& status) {
  auto state = std::make_shared<StreamState>(StreamState::Side::kClient, 0, 0);
  state->FailBeforeOpen(status);
  return Stream(state);
}

}  // namespace rrpc::rpc
