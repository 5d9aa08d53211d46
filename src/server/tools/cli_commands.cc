#include "server/tools/cli_commands.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/text_format.h>

#include <memory>

#include "rpc/security/auth_token.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/util/sockaddr.h"
#include "server/tools/cli_call.h"
#include "server/tools/cli_descriptors.h"
#include "server/web/http_client.h"

namespace rrpc::server {

namespace pb = google::protobuf;

namespace {

// What one command needs: the server (an address, or a target's channel, on a client messenger)
// and its descriptors.
struct CliContext {
  CliContext() = default;
  CliContext(CliContext&&) = default;
  CliContext& operator=(CliContext&&) = default;
  // Shuts the messenger down on this (the CLI's) thread, so that no reactor is left running when
  // the process exits: a channel's attempts may hold the messenger after the command's call ended.
  ~CliContext() {
    if (server.messenger != nullptr) server.messenger->Shutdown();
  }

  CliServer server;
  std::unique_ptr<DescriptorSource> source;
  ReflectionDescriptorSource* reflection = nullptr;  // == source when descriptors come from it
};

Status BadUsage(const std::string& what) {
  return Status::InvalidArgument(what, "run rrpc-cli --help for usage");
}

// `server` is "host:port" or a cluster target ("scheme://...": its channel, once the resolver
// has named servers, within the timeout).
Result<CliContext> MakeContext(const std::string& server, const CliOptions& options) {
  CliContext ctx;
  const bool target = server.find("://") != std::string::npos;
  if (!target) {
    Result<Sockaddr> addr = Sockaddr::Parse(server);
    if (!addr.ok()) return addr.status().CloneAndPrepend("bad server address");
    ctx.server.addr = *addr;
  }
  rpc::MessengerBuilder builder("rrpc-cli");
  builder.set_num_reactors(1).set_num_workers(1);
  builder.mutable_options()->enable_metrics = false;
  builder.mutable_options()->security = options.security;
  builder.mutable_options()->transport_factory = options.transport_factory;
  RRPC_ASSIGN_OR_RETURN(ctx.server.messenger, builder.Build());
  if (target) {
    RRPC_ASSIGN_OR_RETURN(auto channel, rpc::Channel::Create(ctx.server.messenger, server));
    RRPC_RETURN_NOT_OK(channel->WaitForServers(MonoTime::Now() + options.timeout));
    ctx.server.channel = std::move(channel);
  }
  if (options.proto_files.empty()) {
    auto reflection = std::make_unique<ReflectionDescriptorSource>(ctx.server, options.timeout);
    ctx.reflection = reflection.get();
    ctx.source = std::move(reflection);
  } else {
    RRPC_ASSIGN_OR_RETURN(
        ctx.source, ProtoFileDescriptorSource::Load(options.proto_files, options.proto_paths));
  }
  return ctx;
}

Status RunCall(const std::vector<std::string>& args, const CliOptions& options, std::ostream& out,
               std::ostream& err) {
  if (args.size() < 3 || args.size() > 4) {
    return BadUsage("call takes HOST:PORT SERVICE.METHOD ['TEXT-FORMAT REQUEST']");
  }
  RRPC_ASSIGN_OR_RETURN(MethodName name, ParseMethodName(args[2]));
  rpc::TraceContext trace = rpc::TraceContext::NewRoot(/*sampled=*/true);
  if (!options.traceparent.empty()) {
    Result<rpc::TraceContext> given = rpc::TraceContext::FromTraceparent(options.traceparent);
    if (!given.ok()) return given.status().CloneAndPrepend("bad --traceparent");
    trace = *given;
  }
  RRPC_ASSIGN_OR_RETURN(CliContext ctx, MakeContext(args[1], options));
  // Before the call: a call that fails or hangs can be looked up too (/rpcz?trace=ID).
  err << "trace_id: " << trace.TraceIdHex() << "\n";
  RRPC_ASSIGN_OR_RETURN(std::string response, CallMethodWithText(ctx.server, ctx.source.get(), name,
                                                                 args.size() == 4 ? args[3] : "",
                                                                 options.timeout, trace));
  out << response;
  return Status::OK();
}

Status RunList(const std::vector<std::string>& args, const CliOptions& options, std::ostream& out) {
  if (args.size() != 2) return BadUsage("list takes HOST:PORT");
  CliOptions reflection_only = options;
  reflection_only.proto_files.clear();  // listing is what the server serves, by definition
  RRPC_ASSIGN_OR_RETURN(CliContext ctx, MakeContext(args[1], reflection_only));
  RRPC_ASSIGN_OR_RETURN(std::vector<std::string> names, ctx.reflection->ListServices());
  for (const std::string& name : names) {
    out << name << "\n";
    Result<const pb::ServiceDescriptor*> service = ctx.source->FindService(name);
    if (!service.ok()) continue;  // a service without a descriptor is listed by name only
    for (int i = 0; i < (*service)->method_count(); i++) {
      const pb::MethodDescriptor* m = (*service)->method(i);
      out << "  " << m->name() << "(" << m->input_type()->full_name() << ") returns ("
          << m->output_type()->full_name() << ")\n";
    }
  }
  return Status::OK();
}

Status RunStatus(const std::vector<std::string>& args, const CliOptions& options,
                 std::ostream& out) {
  if (args.size() != 2) return BadUsage("status takes HOST:PORT");
  RRPC_ASSIGN_OR_RETURN(CliContext ctx, MakeContext(args[1], options));
  RRPC_ASSIGN_OR_RETURN(
      std::string response,
      CallMethodWithText(ctx.server, ctx.source.get(), {options.status_service, "GetStatus"}, "",
                         options.timeout));
  out << response;
  return Status::OK();
}

// The status service's GetMetrics when it has one (its response's one string field is the
// Prometheus text); otherwise the web UI's /metrics, which needs --webserver.
Status RunMetrics(const std::vector<std::string>& args, const CliOptions& options,
                  std::ostream& out) {
  if (args.size() != 2) return BadUsage("metrics takes HOST:PORT");
  if (!options.webserver.empty()) {
    Result<Sockaddr> web = Sockaddr::Parse(options.webserver);
    if (!web.ok()) return web.status().CloneAndPrepend("bad --webserver address");
    RRPC_ASSIGN_OR_RETURN(HttpReply reply, HttpGet(*web, "/metrics", options.timeout));
    if (reply.status != 200) {
      return Status::RemoteError("GET /metrics answered " + reply.status_line, options.webserver);
    }
    out << reply.body;
    return Status::OK();
  }
  RRPC_ASSIGN_OR_RETURN(CliContext ctx, MakeContext(args[1], options));
  Result<const pb::MethodDescriptor*> method =
      ResolveMethod(ctx.source.get(), {options.status_service, "GetMetrics"});
  if (!method.ok()) {
    if (!method.status().IsNotFound()) return method.status();
    return Status::NotFound(options.status_service + " has no GetMetrics",
                            "pass --webserver=HOST:PORT of the server's web UI to read /metrics");
  }
  pb::DynamicMessageFactory factory;
  RRPC_ASSIGN_OR_RETURN(std::unique_ptr<pb::Message> request,
                        ParseTextRequest((*method)->input_type(), &factory, ""));
  std::unique_ptr<pb::Message> response(factory.GetPrototype((*method)->output_type())->New());
  RRPC_RETURN_NOT_OK(CallMethod(ctx.server, *method, *request, response.get(), options.timeout));
  const pb::Descriptor* type = response->GetDescriptor();
  if (type->field_count() == 1 && type->field(0)->type() == pb::FieldDescriptor::TYPE_STRING &&
      !type->field(0)->is_repeated()) {
    out << response->GetReflection()->GetString(*response, type->field(0));
  } else {
    std::string text;
    pb::TextFormat::PrintToString(*response, &text);
    out << text;
  }
  return Status::OK();
}

}  // namespace

int CliExitCode(const Status& status) {
  if (status.ok()) return kCliExitOk;
  if (status.IsInvalidArgument() || status.IsNotFound()) return kCliExitBadInput;
  return kCliExitCallFailed;
}

// mint-token KEY_FILE USER SECONDS: prints a token for USER valid SECONDS from now, signed with
// the server's --rpc_token_key_file.
Status RunMintToken(const std::vector<std::string>& args, std::ostream& out) {
  if (args.size() != 4) return BadUsage("usage: mint-token KEY_FILE USER SECONDS");
  char* end = nullptr;
  const long long seconds = strtoll(args[3].c_str(), &end, 10);
  if (end == args[3].c_str() || *end != '\0' || seconds <= 0) {
    return BadUsage("SECONDS must be a positive number");
  }
  Result<security::TokenKey> key = security::TokenKey::FromFile(args[1]);
  if (!key.ok()) return BadUsage(key.status().ToString());
  out << key->Mint(args[2], security::UnixSecondsNow() + seconds) << "\n";
  return Status::OK();
}

int RunCli(const std::vector<std::string>& args, const CliOptions& options, std::ostream& out,
           std::ostream& err) {
  if (args.empty()) {
    err << CliUsage();
    return kCliExitBadInput;
  }
  Status s;
  const std::string& command = args[0];
  if (command == "call") {
    s = RunCall(args, options, out, err);
  } else if (command == "list") {
    s = RunList(args, options, out);
  } else if (command == "status") {
    s = RunStatus(args, options, out);
  } else if (command == "metrics") {
    s = RunMetrics(args, options, out);
  } else if (command == "mint-token") {
    s = RunMintToken(args, out);
  } else {
    s = BadUsage("unknown command '" + command + "'");
  }
  if (!s.ok()) err << "error: " << s.ToString() << "\n";
  return CliExitCode(s);
}

std::string CliUsage() {
  return "rrpc-cli: calls any method of a running rrpc server.\n"
         "\n"
         "  rrpc-cli call HOST:PORT SERVICE.METHOD ['TEXT-FORMAT REQUEST']\n"
         "      e.g. rrpc-cli call 127.0.0.1:7050 rrpc.rtest.EchoService.Add 'a: 1 b: 2'\n"
         "  rrpc-cli list HOST:PORT       the services and methods the server serves\n"
         "  rrpc-cli status HOST:PORT     the server's status (ServerStatusService.GetStatus)\n"
         "  rrpc-cli metrics HOST:PORT    Prometheus metrics: GetMetrics of the status service,\n"
         "                                or with --webserver=HOST:PORT the web UI's /metrics\n"
         "  rrpc-cli mint-token KEY_FILE USER SECONDS\n"
         "                                prints an authentication token for USER, valid SECONDS,\n"
         "                                signed with the server's --rpc_token_key_file\n"
         "\n"
         "HOST:PORT may be a cluster target instead (docs/cluster.md): list://H:P,H:P,\n"
         "file:///PATH, dns:///NAME:PORT or etcd://H:P/PREFIX; the call goes to one of its\n"
         "servers (another if that one is down or draining).\n"
         "\n"
         "TLS and authentication: the --rpc_* security flags (docs/security.md), e.g.\n"
         "--rpc_ca_certificate_file=ca.crt (TLS, server verified), plus a client certificate or\n"
         "--rpc_auth_token_file=FILE to authenticate.\n"
         "\n"
         "Descriptors come from the server's reflection service (rrpc.server.ServerReflection),\n"
         "or from --proto=FILE[,FILE] with --proto_path=DIR[:DIR] when the server has none.\n"
         "The response is printed in protobuf text format. `call` prints its trace id on the\n"
         "error stream (a new sampled trace, or --traceparent=VALUE's): /rpcz?trace=ID on the\n"
         "server's web UI lists the call's spans.\n"
         "\n"
         "Exit codes: 0 success; 1 the call failed (network, timeout, the server's error);\n"
         "2 bad command (usage, unknown service or method, bad request text or .proto file).\n";
}

}  // namespace rrpc::server
