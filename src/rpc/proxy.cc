#include "rpc/proxy.h"

#include "rpc/messenger.h"
#include "rpc/outbound_call.h"
#include "rpc/reactor.h"
#include "rpc/rpc_controller.h"
#include "util/countdown_latch.h"

namespace rrpc::rpc {

Proxy::Proxy(std::shared_ptr<Messenger> messenger, const Sockaddr& remote, std::string service_name)
    : messenger_(std::move(messenger)), remote_(remote), service_name_(std::move(service_name)) {}

Proxy::~Proxy() = default;

void Proxy::AsyncRequest(const std::string& method, const google::protobuf::Message& request,
                         google::protobuf::Message* response, RpcController* controller,
                         ResponseCallback callback) const {
  CHECK(!controller->finished()) << "RpcController reused without Reset()";
  scoped_refptr<OutboundCall> call(
      new OutboundCall(remote_, service_name_, method, response, controller, std::move(callback)));
  if (MessengerMetrics* metrics = messenger_->metrics()) {
    call->set_metrics(client_metrics_.Get(metrics, service_name_, method));
  }
  Status s =
      call->Serialize(request, messenger_->NextCallId(), messenger_->options().max_message_size);
  if (!s.ok()) {
    call->FailBeforeSend(s);
    return;
  }
  messenger_->QueueOutboundCall(std::move(call));
}

Status Proxy::SyncRequest(const std::string& method, const google::protobuf::Message& request,
                          google::protobuf::Message* response, RpcController* controller) const {
  if (Reactor::Current() != nullptr) {
    // The reactor would wait for a response that only a reactor can deliver: with one reactor,
    // or the connection on this one, it never comes.
    return Status::IllegalState(
        "synchronous call from a reactor thread (a callback or an inline handler): use the "
        "asynchronous call");
  }
  CountDownLatch latch(1);
  AsyncRequest(method, request, response, controller, [&latch] { latch.CountDown(); });
  latch.Wait();
  return controller->status();
}

}  // namespace rrpc::rpc
