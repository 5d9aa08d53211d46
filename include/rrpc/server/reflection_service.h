// ReflectionService: serves rrpc.server.ServerReflection (reflection.proto), which tells a client
// what a messenger serves and hands out the protobuf descriptors of it, so generic tools
// (rrpc-cli) can call any method with no compiled-in stubs. It answers from the services
// registered on its messenger, read at call time; a service whose ServiceIf::service_descriptor()
// is nullptr is listed by name only. Handlers are thread-safe (they read immutable state).
//
//   RRPC_RETURN_NOT_OK(messenger->RegisterService(server::MakeReflectionService(messenger.get())));
#pragma once

#include <google/protobuf/descriptor.h>

#include <memory>
#include <string>
#include <vector>

#include "rrpc/rpc/service_if.h"
#include "rrpc/server/reflection.rrpc.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {
class Messenger;
}

namespace rrpc::server {

class ReflectionService : public ServerReflectionIf {
 public:
  // `messenger` serves this service, so it owns it and outlives it.
  explicit ReflectionService(const rpc::Messenger* messenger);

  void ListServices(const ListServicesRequestPB* req, ListServicesResponsePB* resp,
                    rpc::RpcContext* context) override;
  void GetFileDescriptors(const GetFileDescriptorsRequestPB* req,
                          GetFileDescriptorsResponsePB* resp, rpc::RpcContext* context) override;

  // The work of the handlers, without an RPC (for tests and in-process callers).
  void CollectServices(ListServicesResponsePB* resp) const;
  Status CollectFileDescriptors(const GetFileDescriptorsRequestPB& req,
                                GetFileDescriptorsResponsePB* resp) const;

 private:
  // The files declaring the registered services (those that publish a descriptor).
  std::vector<const google::protobuf::FileDescriptor*> ServiceFiles() const;

  const rpc::Messenger* const messenger_;
};

// Serializes `file` and every file it imports, transitively, as FileDescriptorProtos, each file
// after all of its imports (so a DescriptorPool can build them in order); `file` comes last.
std::vector<std::string> SerializeWithDependencies(const google::protobuf::FileDescriptor* file);

// The reflection service of `messenger`, ready for Messenger::RegisterService (or
// ServerBase::RegisterService).
std::unique_ptr<rpc::ServiceIf> MakeReflectionService(const rpc::Messenger* messenger);

}  // namespace rrpc::server
