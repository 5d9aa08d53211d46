#include "server/tools/cli_descriptors.h"

#include <google/protobuf/descriptor.pb.h>
#include <unistd.h>

#include <algorithm>

#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/server/reflection.rrpc.h"
#include "server/tools/cli_call.h"

namespace rrpc::server {

namespace pb = google::protobuf;

namespace {

constexpr char kReflectionService[] = "rrpc.server.ServerReflection";

// A reflection call's failure, phrased for someone running the CLI. Errors that mean "no such
// thing" become NotFound so the CLI can tell them from a failed call.
Status ReflectionError(const rpc::RpcController& ctl, const std::string& what) {
  const rpc::ErrorStatusPB* error = ctl.error_response();
  if (error != nullptr && (error->code() == rpc::ErrorStatusPB::ERROR_NO_SUCH_SERVICE ||
                           error->code() == rpc::ErrorStatusPB::ERROR_NO_SUCH_METHOD)) {
    return Status::NotFound(std::string("the server does not serve ") + kReflectionService +
                            " (register MakeReflectionService(), or pass --proto)");
  }
  if (error != nullptr && error->code() == rpc::ErrorStatusPB::ERROR_APPLICATION &&
      error->app_status_code() == static_cast<int>(Status::Code::kNotFound)) {
    return Status::NotFound(error->message());
  }
  return AsCallFailure(ctl.status().CloneAndPrepend(what));
}

class CollectingErrors : public pb::compiler::MultiFileErrorCollector {
 public:
  void AddError(const std::string& filename, int line, int column,
                const std::string& message) override {
    // protoc's own format: file:line:column: message (1-based; the parser counts from 0).
    if (!text_.empty()) text_ += "\n";
    text_ += filename;
    if (line >= 0) text_ += ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1);
    text_ += ": " + message;
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace

ReflectionDescriptorSource::ReflectionDescriptorSource(CliServer server, MonoDelta timeout)
    : server_(std::move(server)), timeout_(timeout) {}

Result<const pb::ServiceDescriptor*> ReflectionDescriptorSource::FindService(
    const std::string& full_name) {
  if (const pb::ServiceDescriptor* known = pool_.FindServiceByName(full_name)) return known;
  ServerReflectionProxy proxy = server_.New<ServerReflectionProxy>();
  GetFileDescriptorsRequestPB req;
  req.set_service(full_name);
  GetFileDescriptorsResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(timeout_);
  if (!proxy.GetFileDescriptors(req, &resp, &ctl).ok()) {
    Status s = ReflectionError(ctl, "fetching descriptors from " + server_.name());
    if (!s.IsNotFound() || s.message().find(kReflectionService) != std::string::npos) return s;
    // Say what the server does serve: the usual mistake is a missing package prefix.
    std::string known;
    Result<std::vector<std::string>> names = ListServices();
    if (names.ok()) {
      for (const std::string& name : *names) known += (known.empty() ? "" : ", ") + name;
    }
    return Status::NotFound("the server has no service " + full_name,
                            known.empty() ? "" : "it serves: " + known);
  }
  // Imports come first; a file already built (shared by two services) is skipped.
  for (const std::string& bytes : resp.file_descriptor_protos()) {
    pb::FileDescriptorProto proto;
    if (!proto.ParseFromString(bytes)) {
      return Status::Corruption("the server sent a FileDescriptorProto that does not parse");
    }
    if (pool_.FindFileByName(proto.name()) != nullptr) continue;
    if (pool_.BuildFile(proto) == nullptr) {
      return Status::Corruption("the server's descriptor of " + proto.name() + " does not build");
    }
  }
  const pb::ServiceDescriptor* service = pool_.FindServiceByName(full_name);
  if (service == nullptr) {
    return Status::Corruption("the server's descriptors do not declare " + full_name);
  }
  return service;
}

Result<std::vector<std::string>> ReflectionDescriptorSource::ListServices() {
  ServerReflectionProxy proxy = server_.New<ServerReflectionProxy>();
  ListServicesResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(timeout_);
  if (!proxy.ListServices(ListServicesRequestPB(), &resp, &ctl).ok()) {
    return ReflectionError(ctl, "listing the services of " + server_.name());
  }
  std::vector<std::string> names;
  for (const ServiceSummaryPB& service : resp.services()) names.push_back(service.name());
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::unique_ptr<ProtoFileDescriptorSource>> ProtoFileDescriptorSource::Load(
    const std::vector<std::string>& proto_files, const std::vector<std::string>& proto_paths) {
  if (proto_files.empty()) return Status::InvalidArgument("no .proto file given");
  std::unique_ptr<ProtoFileDescriptorSource> source(new ProtoFileDescriptorSource());
  if (proto_paths.empty()) {
    source->source_tree_.MapPath("", ".");
  } else {
    for (const std::string& dir : proto_paths) source->source_tree_.MapPath("", dir);
  }
#ifdef RRPC_PROTOBUF_PROTO_DIR
  // protobuf's own .proto files (descriptor.proto, which rrpc_options.proto imports), where
  // protoc finds them; after the user's paths, which may shadow them.
  source->source_tree_.MapPath("google/protobuf", RRPC_PROTOBUF_PROTO_DIR "/google/protobuf");
#endif
  auto errors = std::make_unique<CollectingErrors>();
  CollectingErrors* collected = errors.get();
  source->errors_ = std::move(errors);
  source->importer_ =
      std::make_unique<pb::compiler::Importer>(&source->source_tree_, source->errors_.get());
  for (const std::string& file : proto_files) {
    // A path on disk inside a proto_path is imported by its name relative to it, as protoc does.
    std::string virtual_name = file;
    std::string shadowing;
    if (access(file.c_str(), R_OK) == 0 &&
        source->source_tree_.DiskFileToVirtualFile(file, &virtual_name, &shadowing) !=
            pb::compiler::DiskSourceTree::SUCCESS) {
      virtual_name = file;
    }
    const pb::FileDescriptor* descriptor = source->importer_->Import(virtual_name);
    if (descriptor == nullptr) {
      std::string why = collected->text();
      if (why.empty()) why = source->source_tree_.GetLastErrorMessage();
      return Status::InvalidArgument("cannot load " + file, why);
    }
    source->files_.push_back(descriptor);
  }
  return source;
}

Result<const pb::ServiceDescriptor*> ProtoFileDescriptorSource::FindService(
    const std::string& full_name) {
  const pb::ServiceDescriptor* service = importer_->pool()->FindServiceByName(full_name);
  if (service != nullptr) return service;
  std::string known;
  for (const pb::FileDescriptor* file : files_) {
    for (int i = 0; i < file->service_count(); i++) {
      known += (known.empty() ? "" : ", ") + file->service(i)->full_name();
    }
  }
  return Status::NotFound("no service " + full_name + " in the given .proto files",
                          known.empty() ? "they declare no services" : "they declare: " + known);
}

}  // namespace rrpc::server
