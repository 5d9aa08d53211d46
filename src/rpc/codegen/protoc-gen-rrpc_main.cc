// protoc-gen-rrpc: the protoc plugin that turns each service of a .proto file into a typed
// service base (<Service>If, for servers) and a typed client proxy (<Service>Proxy) on top of
// rrpc's runtime (rpc/service_if.h, rpc/proxy.h). For foo/bar.proto it writes foo/bar.rrpc.h and
// foo/bar.rrpc.cc, always both (the build lists them as outputs even when a file has no services).
//
//   protoc --proto_path=src --cpp_out=OUT --plugin=protoc-gen-rrpc=PATH --rrpc_out=OUT foo.proto
//
// Single-threaded: protoc runs the plugin once per invocation.
#include <google/protobuf/compiler/code_generator.h>
#include <google/protobuf/compiler/cpp/names.h>
#include <google/protobuf/compiler/plugin.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/io/printer.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rrpc/rpc/rrpc_options.pb.h"

namespace rrpc::codegen {
namespace {

namespace pb = ::google::protobuf;

// The style's line limit; generated code keeps to it so it reads like the rest of the tree.
constexpr size_t kColumns = 100;

// Member names the generated classes or their bases already use: a proto method of the same name
// would hide or clash with them.
const std::set<std::string>& ReservedMethodNames() {
  static const auto* const names =
      new std::set<std::string>{"service_name",       "static_service_name",
                                "service_descriptor", "FindMethod",
                                "AddMethod",          "SyncRequest",
                                "AsyncRequest",       "remote",
                                "ServiceIf",          "Proxy",
                                "OpenStream"};
  return *names;
}

std::string StripProto(const std::string& proto_name) {
  return pb::compiler::cpp::StripProto(proto_name);
}

// The C++ name protoc's C++ generator gives a message, e.g. "::pkg::Outer_Inner". libprotoc's
// own helper is the one source of truth for nesting, keyword escaping and map entries.
std::string CppMessage(const pb::Descriptor* message) {
  return pb::compiler::cpp::QualifiedClassName(message);
}

// "a.b.c" -> "a::b::c" (protoc's C++ generator does the same with packages); "" for no package.
std::string CppNamespace(const pb::FileDescriptor* file) {
  std::string ns;
  for (char c : file->package()) {
    if (c == '.') {
      ns += "::";
    } else {
      ns += c;
    }
  }
  return ns;
}

// A proto element's leading comment as `//` lines (each ending in '\n'); "" when it has none.
template <typename DescriptorT>
std::string LeadingComment(const DescriptorT* descriptor) {
  pb::SourceLocation location;
  if (!descriptor->GetSourceLocation(&location) || location.leading_comments.empty()) {
    return "";
  }
  std::string text = location.leading_comments;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += "//" + line + "\n";
    start = end + 1;
  }
  return out;
}

// `text` as `//` lines (each ending in '\n'), words reflowed to fit the line limit at `indent`.
std::string Comment(size_t indent, const std::string& text) {
  std::string out;
  std::string line = "//";
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    if (line != "//" && indent + line.size() + 1 + word.size() > kColumns) {
      out += line + "\n";
      line = "//";
    }
    line += " " + word;
  }
  return out + line + "\n";
}

// Lays out `head(params...)tail` the way clang-format's Google style does for declarations: on
// one line when it fits; else parameters bin-packed and aligned after the open parenthesis; else
// (when even that overflows) broken after the parenthesis with a 4-space continuation. Every line
// starts at column `indent`, which the printer adds; the result holds only the relative indents.
std::string Wrap(size_t indent, const std::string& head, const std::vector<std::string>& params,
                 const std::string& tail) {
  std::string joined;
  for (size_t i = 0; i < params.size(); ++i) {
    joined += (i == 0 ? "" : ", ") + params[i];
  }
  if (indent + head.size() + 1 + joined.size() + 1 + tail.size() <= kColumns) {
    return head + "(" + joined + ")" + tail;
  }
  // Packs the params after `first`, continuing on lines that start with `align` spaces. Returns
  // false when some line overflows (the text is complete either way).
  auto pack = [&](size_t align, std::string first, std::string* out) {
    std::string line = std::move(first);
    bool line_has_param = false;
    bool fits = true;
    for (size_t i = 0; i < params.size(); ++i) {
      std::string piece = params[i] + (i + 1 == params.size() ? ")" + tail : ",");
      if (line_has_param && indent + line.size() + 1 + piece.size() > kColumns) {
        *out += line + "\n";
        line = std::string(align, ' ');
        line_has_param = false;
      }
      line += (line_has_param ? " " : "") + piece;
      line_has_param = true;
      fits = fits && indent + line.size() <= kColumns;
    }
    *out += line;
    return fits;
  };
  std::string out;
  if (pack(head.size() + 1, head + "(", &out)) return out;
  // Even a name too long for the limit must yield valid code, so this layout is taken as it is.
  out = head + "(\n";
  pack(4, std::string(4, ' '), &out);
  return out;
}

// `lhs = rhs;` with a break after '=' when it would not fit at column `indent`; relative indents
// only, as for Wrap().
std::string Assign(size_t indent, const std::string& lhs, const std::string& rhs) {
  if (indent + lhs.size() + 3 + rhs.size() + 1 <= kColumns) return lhs + " = " + rhs + ";";
  return lhs + " =\n    " + rhs + ";";
}

// `cls::rest` at column 0, broken after `::` when too long (as clang-format does).
std::string Member(const std::string& cls, const std::string& rest) {
  if (cls.size() + 2 + rest.size() <= kColumns) return cls + "::" + rest;
  return cls + "::\n    " + rest;
}

// What the generated code needs to know about one method.
struct MethodInfo {
  std::string name;      // proto (and C++) method name, e.g. "Echo"
  std::string request;   // "::rrpc::rtest::EchoRequestPB"
  std::string response;  // "::rrpc::rtest::EchoResponsePB"
  const pb::MethodDescriptor* descriptor;
};

std::vector<MethodInfo> Methods(const pb::ServiceDescriptor* service) {
  std::vector<MethodInfo> methods;
  for (int i = 0; i < service->method_count(); ++i) {
    const pb::MethodDescriptor* m = service->method(i);
    methods.push_back({m->name(), CppMessage(m->input_type()), CppMessage(m->output_type()), m});
  }
  return methods;
}

// Streams (docs/streams.md): a method with `stream` on its request, its response or both.
bool IsStream(const MethodInfo& m) {
  return m.descriptor->client_streaming() || m.descriptor->server_streaming();
}
// Whether the stream's opening call carries the request (a server stream's one request).
bool OpensWithRequest(const MethodInfo& m) { return !m.descriptor->client_streaming(); }
std::string StreamKindName(const MethodInfo& m) {
  if (!IsStream(m)) return "::rrpc::rpc::StreamKind::kNone";
  if (m.descriptor->client_streaming() && m.descriptor->server_streaming()) {
    return "::rrpc::rpc::StreamKind::kBidi";
  }
  return m.descriptor->client_streaming() ? "::rrpc::rpc::StreamKind::kClient"
                                          : "::rrpc::rpc::StreamKind::kServer";
}
std::string ServerStreamType(const MethodInfo& m) {
  return "::rrpc::rpc::ServerStream<" + m.request + ", " + m.response + ">";
}
std::string ClientStreamType(const MethodInfo& m) {
  return "::rrpc::rpc::ClientStream<" + m.request + ", " + m.response + ">";
}

// Signature pieces shared by declarations and definitions.
std::vector<std::string> HandlerParams(const MethodInfo& m) {
  if (IsStream(m)) {
    if (OpensWithRequest(m))
      return {"const " + m.request + "* req", ServerStreamType(m) + " stream"};
    return {ServerStreamType(m) + " stream"};
  }
  return {"const " + m.request + "* req", m.response + "* resp",
          "::rrpc::rpc::RpcContext* context"};
}
// A stream method's proxy parameters; `with_default`: the declaration's (options = {}).
std::vector<std::string> StreamOpenParams(const MethodInfo& m, bool with_default) {
  std::vector<std::string> params;
  if (OpensWithRequest(m)) params.push_back("const " + m.request + "& req");
  params.push_back(std::string("const ::rrpc::rpc::StreamOptions& options") +
                   (with_default ? " = {}" : ""));
  return params;
}
std::vector<std::string> SyncParams(const MethodInfo& m) {
  return {"const " + m.request + "& req", m.response + "* resp",
          "::rrpc::rpc::RpcController* controller"};
}
std::vector<std::string> AsyncParams(const MethodInfo& m) {
  std::vector<std::string> params = SyncParams(m);
  params.push_back("::rrpc::rpc::ResponseCallback callback");
  return params;
}
std::vector<std::string> ProxyCtorParams() {
  return {"::std::shared_ptr<::rrpc::rpc::Messenger> messenger", "const ::rrpc::Sockaddr& remote"};
}
std::vector<std::string> ProxyChannelCtorParams() {
  return {"::std::shared_ptr<::rrpc::rpc::ChannelIf> channel"};
}
bool Idempotent(const MethodInfo& m) {
  return m.descriptor->options().GetExtension(::rrpc::idempotent);
}
bool Tracked(const MethodInfo& m) { return m.descriptor->options().GetExtension(::rrpc::tracked); }
// The C++ value of option (rrpc.compression) ("" when unset): rrpc::rpc::Compression's
// enumerator for "none", "lz4" or "zstd".
std::string CompressionEnumerator(const std::string& name) {
  if (name == "none") return "::rrpc::rpc::Compression::kNone";
  if (name == "lz4") return "::rrpc::rpc::Compression::kLz4";
  if (name == "zstd") return "::rrpc::rpc::Compression::kZstd";
  return "";
}
std::string Compression(const MethodInfo& m) {
  return m.descriptor->options().GetExtension(::rrpc::compression);
}

// Rejects what rrpc cannot serve, with errors that name the offending element.
bool Validate(const pb::FileDescriptor* file, std::string* error) {
  for (int s = 0; s < file->service_count(); ++s) {
    const pb::ServiceDescriptor* service = file->service(s);
    std::set<std::string> names;
    for (int i = 0; i < service->method_count(); ++i) names.insert(service->method(i)->name());
    for (int i = 0; i < service->method_count(); ++i) {
      const pb::MethodDescriptor* m = service->method(i);
      if ((m->client_streaming() || m->server_streaming()) &&
          (m->options().GetExtension(::rrpc::tracked) ||
           m->options().GetExtension(::rrpc::inline_handler))) {
        *error = m->full_name() +
                 ": a stream method cannot be (rrpc.tracked) or (rrpc.inline_handler); drop the "
                 "option";
        return false;
      }
      if (ReservedMethodNames().count(m->name()) != 0) {
        *error = m->full_name() + ": method name '" + m->name() +
                 "' clashes with a member of rrpc's generated classes; rename it";
        return false;
      }
      if (names.count(m->name() + "Async") != 0) {
        *error = m->full_name() + ": its asynchronous proxy method would clash with method '" +
                 m->name() + "Async'; rename one of them";
        return false;
      }
      if (m->options().GetExtension(::rrpc::idempotent) &&
          m->options().GetExtension(::rrpc::tracked)) {
        *error = m->full_name() +
                 ": options (rrpc.idempotent) and (rrpc.tracked) exclude each other (tracked is "
                 "for methods that must not run twice); keep one";
        return false;
      }
      const std::string& codec = m->options().GetExtension(::rrpc::compression);
      if (m->options().HasExtension(::rrpc::compression) && CompressionEnumerator(codec).empty()) {
        *error = m->full_name() + ": option (rrpc.compression) = \"" + codec +
                 "\" is not a codec; use \"lz4\", \"zstd\" or \"none\"";
        return false;
      }
      for (const pb::Descriptor* message : {m->input_type(), m->output_type()}) {
        if (message->file()->options().optimize_for() == pb::FileOptions::LITE_RUNTIME) {
          *error = m->full_name() + ": " + message->full_name() +
                   " is a lite message (optimize_for = LITE_RUNTIME); rrpc needs full messages";
          return false;
        }
      }
    }
  }
  return true;
}

// The .pb.h files whose messages the services use, plus the file's own, sorted.
std::set<std::string> MessageHeaders(const pb::FileDescriptor* file) {
  std::set<std::string> headers = {StripProto(file->name()) + ".pb.h"};
  for (int s = 0; s < file->service_count(); ++s) {
    const pb::ServiceDescriptor* service = file->service(s);
    for (int i = 0; i < service->method_count(); ++i) {
      headers.insert(StripProto(service->method(i)->input_type()->file()->name()) + ".pb.h");
      headers.insert(StripProto(service->method(i)->output_type()->file()->name()) + ".pb.h");
    }
  }
  return headers;
}

// Prints `text` line by line so the printer indents each line (it indents only lines that start
// within Print()'s own text, not lines inside a substituted value).
void PrintLines(const std::string& text, pb::io::Printer* p) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    p->Print("$line$\n", "line", text.substr(start, end - start));
    start = end + 1;
  }
}

void PrintBanner(const pb::FileDescriptor* file, pb::io::Printer* p) {
  p->Print("// Generated by protoc-gen-rrpc from $proto$. DO NOT EDIT.\n", "proto", file->name());
}

void OpenNamespace(const std::string& ns, pb::io::Printer* p) {
  if (!ns.empty()) p->Print("namespace $ns$ {\n\n", "ns", ns);
}

void CloseNamespace(const std::string& ns, pb::io::Printer* p) {
  if (!ns.empty()) p->Print("\n}  // namespace $ns$\n", "ns", ns);
}

// A function-local string that is built on first use and never destroyed: proxies pass it by
// reference on every call, and calls still in flight at exit may read it.
void PrintStaticString(size_t indent, const std::string& value, pb::io::Printer* p) {
  PrintLines(
      Assign(indent, "static const auto* const name", "new ::std::string(\"" + value + "\")"), p);
  p->Print("return *name;\n");
}

void PrintServiceBaseDecl(const pb::ServiceDescriptor* service, pb::io::Printer* p) {
  const std::string cls = service->name() + "If";
  const std::string proto_comment = LeadingComment(service);
  if (!proto_comment.empty()) PrintLines(proto_comment + "//\n", p);
  PrintLines(Comment(0, "Server side of " + service->full_name() +
                            ": derive from it, implement each method and register the instance "
                            "with the server. Methods run on worker threads and must finish "
                            "each call through exactly one context->Respond*(), now or later "
                            "from any thread."),
             p);
  p->Print(
      "class $cls$ : public ::rrpc::rpc::ServiceIf {\n"
      " public:\n",
      "cls", cls);
  p->Indent();
  p->Print(
      "// Fills the method table; handlers call the virtual methods below.\n"
      "$cls$();\n"
      "~$cls$() override;\n"
      "// Handlers hold `this`: the service stays where it was built.\n",
      "cls", cls);
  PrintLines(Wrap(2, cls, {"const " + cls + "&"}, " = delete;"), p);
  PrintLines(Wrap(2, cls + "& operator=", {"const " + cls + "&"}, " = delete;"), p);
  p->Print(
      "\n"
      "// \"$full$\"\n"
      "const ::std::string& service_name() const override;\n"
      "static const ::std::string& static_service_name();\n"
      "// The service's descriptor in protobuf's generated pool (for reflection).\n"
      "const ::google::protobuf::ServiceDescriptor* service_descriptor() const override;\n",
      "full", service->full_name());
  for (const MethodInfo& m : Methods(service)) {
    p->Print("\n");
    PrintLines(LeadingComment(m.descriptor), p);
    if (IsStream(m)) {
      PrintLines(Comment(2,
                         "A stream (docs/streams.md): end it through `stream` (Finish). Keep "
                         "a copy of the stream (copies share it) to go on after returning; "
                         "`req` is valid until this returns."),
                 p);
    }
    PrintLines(Wrap(2, "virtual void " + m.name, HandlerParams(m), " = 0;"), p);
  }
  p->Outdent();
  p->Print("};\n");
}

void PrintProxyDecl(const pb::ServiceDescriptor* service, pb::io::Printer* p) {
  const std::string cls = service->name() + "Proxy";
  PrintLines(Comment(0, "Client side of " + service->full_name() +
                            " at one address. Thread-safe. Each Method() blocks until its call "
                            "finishes (never call it on a reactor thread); MethodAsync() returns "
                            "at once and runs `callback` on a reactor thread when the call "
                            "finishes. Either way the outcome is in the controller."),
             p);
  p->Print(
      "class $cls$ : public ::rrpc::rpc::Proxy {\n"
      " public:\n",
      "cls", cls);
  p->Indent();
  PrintLines(Wrap(2, cls, ProxyCtorParams(), ";"), p);
  PrintLines(Wrap(2, "explicit " + cls, ProxyChannelCtorParams(), ";"), p);
  for (const MethodInfo& m : Methods(service)) {
    p->Print("\n");
    PrintLines(LeadingComment(m.descriptor), p);
    if (IsStream(m)) {
      PrintLines(Comment(2, "Opens a stream (docs/streams.md); never blocks."), p);
      PrintLines(Wrap(2, ClientStreamType(m) + " " + m.name, StreamOpenParams(m, true), " const;"),
                 p);
      continue;
    }
    PrintLines(Wrap(2, "::rrpc::Status " + m.name, SyncParams(m), " const;"), p);
    PrintLines(Wrap(2, "void " + m.name + "Async", AsyncParams(m), " const;"), p);
  }
  p->Outdent();
  p->Print("};\n");
}

void GenerateHeader(const pb::FileDescriptor* file, pb::io::Printer* p) {
  PrintBanner(file, p);
  p->Print("#pragma once\n\n");
  if (file->service_count() == 0) {
    p->Print("// $proto$ declares no services.\n\n#include \"$pb_h$\"\n", "proto", file->name(),
             "pb_h", StripProto(file->name()) + ".pb.h");
    return;
  }
  p->Print("#include <memory>\n#include <string>\n\n");
  std::set<std::string> includes = MessageHeaders(file);
  // Enough for a .cc that includes only this header to implement the service (RpcContext), build
  // and run messengers (MessengerBuilder, Listen) and call (RpcController): all public headers.
  includes.insert({"rrpc/rpc/channel_if.h", "rrpc/rpc/messenger.h", "rrpc/rpc/proxy.h",
                   "rrpc/rpc/rpc_context.h", "rrpc/rpc/rpc_controller.h", "rrpc/rpc/service_if.h",
                   "rrpc/rpc/stream.h", "rrpc/util/monotime.h", "rrpc/util/sockaddr.h",
                   "rrpc/util/status.h"});
  for (const std::string& include : includes) p->Print("#include \"$h$\"\n", "h", include);
  p->Print("\n");
  const std::string ns = CppNamespace(file);
  OpenNamespace(ns, p);
  for (int s = 0; s < file->service_count(); ++s) {
    if (s > 0) p->Print("\n");
    PrintServiceBaseDecl(file->service(s), p);
    p->Print("\n");
    PrintProxyDecl(file->service(s), p);
  }
  CloseNamespace(ns, p);
}

// One static accessor per method name, shared by the service's method table and its proxy.
void PrintMethodNames(const pb::ServiceDescriptor* service, pb::io::Printer* p) {
  p->Print("struct $svc$_MethodNames {\n", "svc", service->name());
  p->Indent();
  for (const MethodInfo& m : Methods(service)) {
    p->Print("static const ::std::string& $name$() {\n", "name", m.name);
    p->Indent();
    PrintStaticString(4, m.name, p);
    p->Outdent();
    p->Print("}\n");
  }
  p->Outdent();
  p->Print("};\n");
}

// service_descriptor(): found through a message of the service's own file when it has one, since
// calling that message's descriptor() also makes the linker keep the file's .pb.o (and with it the
// file's registration in the generated pool); otherwise looked up by name in the generated pool.
void PrintServiceDescriptorDef(const pb::ServiceDescriptor* service, pb::io::Printer* p) {
  const std::string cls = service->name() + "If";
  std::string lookup =
      "::google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(\"" +
      service->full_name() + "\")";
  for (const MethodInfo& m : Methods(service)) {
    const pb::Descriptor* local = nullptr;
    if (m.descriptor->input_type()->file() == service->file()) {
      local = m.descriptor->input_type();
    } else if (m.descriptor->output_type()->file() == service->file()) {
      local = m.descriptor->output_type();
    }
    if (local != nullptr) {
      lookup = CppMessage(local) + "::descriptor()->file()->FindServiceByName(\"" +
               service->name() + "\")";
      break;
    }
  }
  PrintLines(
      Member("const ::google::protobuf::ServiceDescriptor* " + cls, "service_descriptor() const {"),
      p);
  p->Indent();
  PrintLines(
      Assign(2, "static const ::google::protobuf::ServiceDescriptor* const descriptor", lookup), p);
  p->Print("return descriptor;\n");
  p->Outdent();
  p->Print("}\n");
}

void PrintServiceBaseDefs(const pb::ServiceDescriptor* service, pb::io::Printer* p) {
  const std::string cls = service->name() + "If";
  const std::string names = service->name() + "_MethodNames";
  PrintLines(Member(cls, cls + "() {"), p);
  p->Indent();
  for (const MethodInfo& m : Methods(service)) {
    p->Print("{\n");
    p->Indent();
    p->Print("::rrpc::rpc::RpcMethodInfo info;\n");
    PrintLines(Assign(4, "info.method_name", names + "::" + m.name + "()"), p);
    PrintLines(Assign(4, "info.request_prototype", "&" + m.request + "::default_instance()"), p);
    PrintLines(Assign(4, "info.response_prototype", "&" + m.response + "::default_instance()"), p);
    if (m.descriptor->options().GetExtension(::rrpc::inline_handler)) {
      p->Print("info.run_inline = true;  // option (rrpc.inline_handler)\n");
    }
    if (Idempotent(m)) p->Print("info.idempotent = true;  // option (rrpc.idempotent)\n");
    if (Tracked(m)) p->Print("info.tracked = true;  // option (rrpc.tracked)\n");
    if (m.descriptor->options().GetExtension(::rrpc::background)) {
      p->Print(
          "info.priority = ::rrpc::rpc::CallPriority::kBackground;  // option (rrpc.background)\n");
    }
    if (IsStream(m)) {
      PrintLines(Assign(4, "info.stream", StreamKindName(m)), p);
      p->Print(
          "info.handler = [this](const ::google::protobuf::Message* req, "
          "::google::protobuf::Message*,\n"
          "                      ::rrpc::rpc::RpcContext* context) {\n");
      p->Indent();
      std::vector<std::string> args;
      if (OpensWithRequest(m)) args.push_back("static_cast<const " + m.request + "*>(req)");
      args.push_back(ServerStreamType(m) + "(context->stream())");
      if (!OpensWithRequest(m)) p->Print("(void)req;\n");
      PrintLines(Wrap(6, m.name, args, ";"), p);
      p->Outdent();
      p->Print(
          "};\n"
          "::rrpc::rpc::ServiceIf::AddMethod(::std::move(info));\n");
      p->Outdent();
      p->Print("}\n");
      continue;
    }
    // The server makes a call's messages from the prototypes above, so the downcasts are exact.
    p->Print(
        "info.handler = [this](const ::google::protobuf::Message* req, "
        "::google::protobuf::Message* resp,\n"
        "                      ::rrpc::rpc::RpcContext* context) {\n");
    p->Indent();
    PrintLines(Wrap(6, m.name,
                    {"static_cast<const " + m.request + "*>(req)",
                     "static_cast<" + m.response + "*>(resp)", "context"},
                    ";"),
               p);
    p->Outdent();
    p->Print(
        "};\n"
        "::rrpc::rpc::ServiceIf::AddMethod(::std::move(info));\n");
    p->Outdent();
    p->Print("}\n");
  }
  p->Outdent();
  p->Print("}\n\n");
  PrintLines(Member(cls, "~" + cls + "() = default;"), p);
  p->Print("\n");
  const std::string service_name_def =
      "const ::std::string& " + cls + "::service_name() const { return static_service_name(); }";
  if (service_name_def.size() <= kColumns) {
    p->Print("$def$\n", "def", service_name_def);
  } else {
    p->Print(
        "const ::std::string& $cls$::service_name() const {\n"
        "  return static_service_name();\n"
        "}\n",
        "cls", cls);
  }
  p->Print("\nconst ::std::string& $cls$::static_service_name() {\n", "cls", cls);
  p->Indent();
  PrintStaticString(2, service->full_name(), p);
  p->Outdent();
  p->Print("}\n\n");
  PrintServiceDescriptorDef(service, p);
}

void PrintProxyDefs(const pb::ServiceDescriptor* service, pb::io::Printer* p) {
  const std::string cls = service->name() + "Proxy";
  const std::string names = service->name() + "_MethodNames";
  PrintLines(Wrap(0, cls + "::" + cls, ProxyCtorParams(), ""), p);
  p->Indent();
  p->Indent();
  PrintLines(
      Wrap(4, ": ::rrpc::rpc::Proxy",
           {"::std::move(messenger)", "remote", service->name() + "If::static_service_name()"},
           " {}"),
      p);
  p->Outdent();
  p->Outdent();
  PrintLines(Wrap(0, cls + "::" + cls, ProxyChannelCtorParams(), ""), p);
  p->Indent();
  p->Indent();
  PrintLines(Wrap(4, ": ::rrpc::rpc::Proxy",
                  {"::std::move(channel)", service->name() + "If::static_service_name()"}, " {}"),
             p);
  p->Outdent();
  p->Outdent();
  for (const MethodInfo& m : Methods(service)) {
    const std::string name = names + "::" + m.name + "()";
    std::vector<std::string> sync_args = {name, "req", "resp", "controller"};
    std::vector<std::string> async_args = {name, "req", "resp", "controller",
                                           "::std::move(callback)"};
    // Validate() refused methods marked both.
    if (Idempotent(m) || Tracked(m)) {
      const std::string kind =
          Tracked(m) ? "::rrpc::rpc::MethodKind::kTracked" : "::rrpc::rpc::MethodKind::kIdempotent";
      sync_args.push_back(kind);
      async_args.push_back(kind);
    }
    // option (rrpc.compression): the call's codec unless its controller names one.
    const std::string codec = CompressionEnumerator(Compression(m));
    const std::string set_codec =
        codec.empty() ? ""
                      : "if (!controller->has_compression()) controller->set_compression(" + codec +
                            ");  // option (rrpc.compression)\n";
    p->Print("\n");
    if (IsStream(m)) {
      PrintLines(Wrap(0, ClientStreamType(m) + " " + cls + "::" + m.name,
                      StreamOpenParams(m, false), " const {"),
                 p);
      p->Indent();
      // option (rrpc.compression): the stream's codec unless its options name one.
      if (!codec.empty()) {
        p->Print("::rrpc::rpc::StreamOptions with_codec = options;\n");
        p->Print(("if (!with_codec.compression) with_codec.compression = " + codec +
                  ";  // option (rrpc.compression)\n")
                     .c_str());
      }
      std::vector<std::string> open_args = {
          name, OpensWithRequest(m) ? "&req" : "nullptr",
          m.descriptor->server_streaming() ? "nullptr" : "&" + m.response + "::default_instance()",
          codec.empty() ? "options" : "with_codec"};
      // A channel may move an idempotent stream (Validate() refused tracked streams).
      if (Idempotent(m)) open_args.push_back("::rrpc::rpc::MethodKind::kIdempotent");
      const std::string open = Wrap(
          2, "return " + ClientStreamType(m) + "(::rrpc::rpc::Proxy::OpenStream", open_args, ");");
      PrintLines(open, p);
      p->Outdent();
      p->Print("}\n");
      continue;
    }
    PrintLines(Wrap(0, "::rrpc::Status " + cls + "::" + m.name, SyncParams(m), " const {"), p);
    p->Indent();
    if (!set_codec.empty()) p->Print(set_codec.c_str());
    PrintLines(Wrap(2, "return ::rrpc::rpc::Proxy::SyncRequest", sync_args, ";"), p);
    p->Outdent();
    p->Print("}\n\n");
    PrintLines(Wrap(0, "void " + cls + "::" + m.name + "Async", AsyncParams(m), " const {"), p);
    p->Indent();
    if (!set_codec.empty()) p->Print(set_codec.c_str());
    PrintLines(Wrap(2, "::rrpc::rpc::Proxy::AsyncRequest", async_args, ";"), p);
    p->Outdent();
    p->Print("}\n");
  }
}

void GenerateSource(const pb::FileDescriptor* file, pb::io::Printer* p) {
  PrintBanner(file, p);
  p->Print("#include \"$h$\"\n", "h", StripProto(file->name()) + ".rrpc.h");
  if (file->service_count() == 0) return;
  p->Print(
      "\n#include <memory>\n#include <string>\n#include <utility>\n\n"
      "#include <google/protobuf/descriptor.h>\n\n");
  const std::string ns = CppNamespace(file);
  OpenNamespace(ns, p);
  p->Print("namespace {\n\n");
  for (int s = 0; s < file->service_count(); ++s) {
    if (s > 0) p->Print("\n");
    PrintMethodNames(file->service(s), p);
  }
  p->Print("\n}  // namespace\n");
  for (int s = 0; s < file->service_count(); ++s) {
    p->Print("\n");
    PrintServiceBaseDefs(file->service(s), p);
    p->Print("\n");
    PrintProxyDefs(file->service(s), p);
  }
  CloseNamespace(ns, p);
}

class RrpcGenerator : public pb::compiler::CodeGenerator {
 public:
  bool Generate(const pb::FileDescriptor* file, const std::string& parameter,
                pb::compiler::GeneratorContext* context, std::string* error) const override {
    if (!parameter.empty()) {
      *error = "protoc-gen-rrpc takes no options (got '" + parameter + "')";
      return false;
    }
    if (!Validate(file, error)) return false;
    const std::string stem = StripProto(file->name());
    {
      std::unique_ptr<pb::io::ZeroCopyOutputStream> out(context->Open(stem + ".rrpc.h"));
      pb::io::Printer printer(out.get(), '$');
      GenerateHeader(file, &printer);
      if (printer.failed()) {
        *error = "failed to write " + stem + ".rrpc.h";
        return false;
      }
    }
    std::unique_ptr<pb::io::ZeroCopyOutputStream> out(context->Open(stem + ".rrpc.cc"));
    pb::io::Printer printer(out.get(), '$');
    GenerateSource(file, &printer);
    if (printer.failed()) {
      *error = "failed to write " + stem + ".rrpc.cc";
      return false;
    }
    return true;
  }

  // Proto3 `optional` fields only matter to the message code (protoc's C++ generator); without
  // this protoc refuses to run the plugin on files that use them.
  uint64_t GetSupportedFeatures() const override { return FEATURE_PROTO3_OPTIONAL; }
};

}  // namespace
}  // namespace rrpc::codegen

int main(int argc, char* argv[]) {
  rrpc::codegen::RrpcGenerator generator;
  return google::protobuf::compiler::PluginMain(argc, argv, &generator);
}
