// The generic call behind `rrpc-cli call`: resolves "package.Service.Method" through a
// DescriptorSource, parses the request from protobuf text format into a DynamicMessage, calls it
// through rpc::Proxy and returns the response (as a message of the same pool). Not thread-safe:
// the CLI's one thread uses it.
//
//   RRPC_ASSIGN_OR_RETURN(MethodName name, ParseMethodName("rrpc.rtest.EchoService.Echo"));
//   RRPC_ASSIGN_OR_RETURN(std::string text,
//                         CallMethodWithText(server, &source, name, "data: 'hi'", 5s));
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <memory>
#include <string>

#include "rrpc/rpc/trace_context.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "server/tools/cli_descriptors.h"
#include "server/tools/cli_server.h"

namespace rrpc::rpc {
class Messenger;
}

namespace rrpc::server {

struct MethodName {
  std::string service;  // "rrpc.rtest.EchoService"
  std::string method;   // "Echo"
};

// "pkg.Service.Method" or "pkg.Service/Method"; InvalidArgument otherwise.
Result<MethodName> ParseMethodName(const std::string& text);

// The method `name` from `source`; NotFound (naming the service's methods) when it has none.
Result<const google::protobuf::MethodDescriptor*> ResolveMethod(DescriptorSource* source,
                                                                const MethodName& name);

// Parses `text` (protobuf text format) into a new message of `type`, made by `factory`.
// InvalidArgument with the parser's line:column messages when it does not parse or leaves a
// required field unset.
Result<std::unique_ptr<google::protobuf::Message>> ParseTextRequest(
    const google::protobuf::Descriptor* type, google::protobuf::MessageFactory* factory,
    const std::string& text);

// Calls `method` at `server` with `request`, waiting up to `timeout`, carrying `trace` (none when
// invalid); fills `response`. Errors keep the server's message; a server that lacks the service
// or method gives NotFound.
Status CallMethod(const CliServer& server, const google::protobuf::MethodDescriptor* method,
                  const google::protobuf::Message& request, google::protobuf::Message* response,
                  MonoDelta timeout, const rpc::TraceContext& trace = {});

// `status` of a failed call, recoded so that CliExitCode() counts it as a failed call even when a
// lower layer said InvalidArgument or NotFound (e.g. a peer that does not speak rrpc).
Status AsCallFailure(const Status& status);

// All of the above: the response in protobuf text format.
Result<std::string> CallMethodWithText(const CliServer& server, DescriptorSource* source,
                                       const MethodName& name, const std::string& request_text,
                                       MonoDelta timeout, const rpc::TraceContext& trace = {});

}  // namespace rrpc::server
