#include "rrpc/server/reflection_service.h"

#include <google/protobuf/descriptor.pb.h>

#include <algorithm>
#include <functional>
#include <set>

#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"

namespace rrpc::server {

namespace pb = google::protobuf;

namespace {

// Depth-first, imports before importers; `done` keeps each file once however many paths reach it.
void AppendWithDependencies(const pb::FileDescriptor* file,
                            std::set<const pb::FileDescriptor*>* done,
                            std::vector<std::string>* out) {
  if (!done->insert(file).second) return;
  for (int i = 0; i < file->dependency_count(); i++) {
    AppendWithDependencies(file->dependency(i), done, out);
  }
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->push_back(proto.SerializeAsString());
}

// The file named `name` among `roots` and their transitive imports; nullptr if none.
const pb::FileDescriptor* FindReachableFile(const std::vector<const pb::FileDescriptor*>& roots,
                                            const std::string& name) {
  std::set<const pb::FileDescriptor*> seen;
  std::vector<const pb::FileDescriptor*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    const pb::FileDescriptor* file = stack.back();
    stack.pop_back();
    if (!seen.insert(file).second) continue;
    if (file->name() == name) return file;
    for (int i = 0; i < file->dependency_count(); i++) stack.push_back(file->dependency(i));
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> SerializeWithDependencies(const pb::FileDescriptor* file) {
  std::vector<std::string> out;
  std::set<const pb::FileDescriptor*> done;
  AppendWithDependencies(file, &done, &out);
  return out;
}

ReflectionService::ReflectionService(const rpc::Messenger* messenger) : messenger_(messenger) {}

void ReflectionService::ListServices(const ListServicesRequestPB* /*req*/,
                                     ListServicesResponsePB* resp, rpc::RpcContext* context) {
  CollectServices(resp);
  context->RespondSuccess();
}

void ReflectionService::GetFileDescriptors(const GetFileDescriptorsRequestPB* req,
                                           GetFileDescriptorsResponsePB* resp,
                                           rpc::RpcContext* context) {
  Status s = CollectFileDescriptors(*req, resp);
  if (!s.ok()) {
    context->RespondFailure(s);
    return;
  }
  context->RespondSuccess();
}

void ReflectionService::CollectServices(ListServicesResponsePB* resp) const {
  std::vector<const rpc::ServiceIf*> services = messenger_->services();
  std::sort(services.begin(), services.end(), [](const rpc::ServiceIf* a, const rpc::ServiceIf* b) {
    return a->service_name() < b->service_name();
  });
  for (const rpc::ServiceIf* service : services) {
    ServiceSummaryPB* summary = resp->add_services();
    summary->set_name(service->service_name());
    const pb::ServiceDescriptor* descriptor = service->service_descriptor();
    if (descriptor == nullptr) continue;
    summary->set_file(descriptor->file()->name());
    for (int i = 0; i < descriptor->method_count(); i++) {
      summary->add_methods(descriptor->method(i)->name());
    }
  }
}

Status ReflectionService::CollectFileDescriptors(const GetFileDescriptorsRequestPB& req,
                                                 GetFileDescriptorsResponsePB* resp) const {
  if (req.has_service() == req.has_file()) {
    return Status::InvalidArgument("set exactly one of 'service' and 'file'");
  }
  const pb::FileDescriptor* file = nullptr;
  if (req.has_service()) {
    const rpc::ServiceIf* service = messenger_->FindService(req.service());
    if (service == nullptr) return Status::NotFound("no such service", req.service());
    if (service->service_descriptor() == nullptr) {
      return Status::NotFound("service publishes no descriptor", req.service());
    }
    file = service->service_descriptor()->file();
  } else {
    // Only files the served services use: reflection reveals nothing else linked into the server.
    file = FindReachableFile(ServiceFiles(), req.file());
    if (file == nullptr) return Status::NotFound("no served service uses file", req.file());
  }
  for (std::string& bytes : SerializeWithDependencies(file)) {
    resp->add_file_descriptor_protos(std::move(bytes));
  }
  return Status::OK();
}

std::vector<const pb::FileDescriptor*> ReflectionService::ServiceFiles() const {
  std::vector<const pb::FileDescriptor*> files;
  for (const rpc::ServiceIf* service : messenger_->services()) {
    if (service->service_descriptor() != nullptr) {
      files.push_back(service->service_descriptor()->file());
    }
  }
  return files;
}

std::unique_ptr<rpc::ServiceIf> MakeReflectionService(const rpc::Messenger* messenger) {
  return std::make_unique<ReflectionService>(messenger);
}

}  // namespace rrpc::server
