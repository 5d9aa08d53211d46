#include "server/tools/cli_call.h"

#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/proxy.h"
#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::server {

namespace pb = google::protobuf;

namespace {

class TextErrors : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!text_.empty()) text_ += "; ";
    // The parser counts from 0 and reports line -1 for whole-message errors (missing fields).
    if (line >= 0) text_ += std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": ";
    text_ += message;
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace

Result<MethodName> ParseMethodName(const std::string& text) {
  size_t split = text.find('/');
  if (split == std::string::npos) split = text.rfind('.');
  if (split == std::string::npos || split == 0 || split + 1 == text.size()) {
    return Status::InvalidArgument("expected SERVICE.METHOD (e.g. rrpc.rtest.EchoService.Echo)",
                                   text);
  }
  return MethodName{text.substr(0, split), text.substr(split + 1)};
}

Result<const pb::MethodDescriptor*> ResolveMethod(DescriptorSource* source,
                                                  const MethodName& name) {
  RRPC_ASSIGN_OR_RETURN(const pb::ServiceDescriptor* service, source->FindService(name.service));
  const pb::MethodDescriptor* method = service->FindMethodByName(name.method);
  if (method != nullptr) return method;
  std::string known;
  for (int i = 0; i < service->method_count(); i++) {
    known += (i == 0 ? "" : ", ") + service->method(i)->name();
  }
  return Status::NotFound("service " + name.service + " has no method " + name.method,
                          "its methods: " + known);
}

Result<std::unique_ptr<pb::Message>> ParseTextRequest(const pb::Descriptor* type,
                                                      pb::MessageFactory* factory,
                                                      const std::string& text) {
  const pb::Message* prototype = factory->GetPrototype(type);
  if (prototype == nullptr) return Status::InvalidArgument("cannot make a message", type->name());
  std::unique_ptr<pb::Message> message(prototype->New());
  TextErrors errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, message.get())) {
    return Status::InvalidArgument("bad " + type->full_name() + " in text format", errors.text());
  }
  return message;
}

Status CallMethod(const CliServer& server, const pb::MethodDescriptor* method,
                  const pb::Message& request, pb::Message* response, MonoDelta timeout,
                  const rpc::TraceContext& trace) {
  rpc::Proxy proxy = server.NewProxy(method->service()->full_name());
  rpc::RpcController ctl;
  ctl.set_timeout(timeout);
  ctl.set_trace_context(trace);
  Status s = proxy.SyncRequest(method->name(), request, response, &ctl);
  if (s.ok()) return s;
  const rpc::ErrorStatusPB* error = ctl.error_response();
  if (error != nullptr && (error->code() == rpc::ErrorStatusPB::ERROR_NO_SUCH_SERVICE ||
                           error->code() == rpc::ErrorStatusPB::ERROR_NO_SUCH_METHOD)) {
    return Status::NotFound("the server does not serve " + method->full_name(), error->message());
  }
  return AsCallFailure(s);
}

Status AsCallFailure(const Status& status) {
  if (!status.IsInvalidArgument() && !status.IsNotFound()) return status;
  return Status::NetworkError(status.ToString());
}

Result<std::string> CallMethodWithText(const CliServer& server, DescriptorSource* source,
                                       const MethodName& name, const std::string& request_text,
                                       MonoDelta timeout, const rpc::TraceContext& trace) {
  RRPC_ASSIGN_OR_RETURN(const pb::MethodDescriptor* method, ResolveMethod(source, name));
  // The factory owns the prototypes the messages were made from: declared first, destroyed last.
  pb::DynamicMessageFactory factory;
  RRPC_ASSIGN_OR_RETURN(std::unique_ptr<pb::Message> request,
                        ParseTextRequest(method->input_type(), &factory, request_text));
  std::unique_ptr<pb::Message> response(factory.GetPrototype(method->output_type())->New());
  RRPC_RETURN_NOT_OK(CallMethod(server, method, *request, response.get(), timeout, trace));
  std::string out;
  if (!pb::TextFormat::PrintToString(*response, &out)) {
    return Status::Corruption("cannot print the response of " + method->full_name());
  }
  return out;
}

}  // namespace rrpc::server
