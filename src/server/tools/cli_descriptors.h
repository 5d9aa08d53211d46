// Where rrpc-cli finds the protobuf descriptors of the services it calls: from a running server's
// reflection service (server/reflection.proto), or from .proto files compiled in process. Each
// source owns the DescriptorPool its descriptors live in, so they stay valid as long as the source.
// Not thread-safe: one thread (the CLI's) uses a source.
//
//   RRPC_ASSIGN_OR_RETURN(auto source,
//                         ProtoFileDescriptorSource::Load({"kv/kv.proto"}, {"src"}));
//   RRPC_ASSIGN_OR_RETURN(const auto* service, source->FindService("rrpc.kv.KvService"));
#pragma once

#include <google/protobuf/compiler/importer.h>
#include <google/protobuf/descriptor.h>

#include <memory>
#include <string>
#include <vector>

#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "server/tools/cli_server.h"

namespace rrpc::rpc {
class Messenger;
}

namespace rrpc::server {

class DescriptorSource {
 public:
  virtual ~DescriptorSource() = default;
  // The service named `full_name` (e.g. "rrpc.rtest.EchoService"): NotFound when the source has
  // no such service, another error when the source could not be asked.
  virtual Result<const google::protobuf::ServiceDescriptor*> FindService(
      const std::string& full_name) = 0;
};

// Asks the server's rrpc.server.ServerReflection for each service's file and its imports, once
// per service, and builds them into its own pool.
class ReflectionDescriptorSource : public DescriptorSource {
 public:
  // Asks `server` (its messenger, a client messenger, must outlive the source); each call may
  // take up to `timeout`.
  ReflectionDescriptorSource(CliServer server, MonoDelta timeout);
  Result<const google::protobuf::ServiceDescriptor*> FindService(
      const std::string& full_name) override;
  // The names the server serves, sorted (for error messages and `rrpc-cli list`).
  Result<std::vector<std::string>> ListServices();

 private:
  const CliServer server_;
  const MonoDelta timeout_;
  google::protobuf::DescriptorPool pool_;
};

// Parses .proto files with protobuf's compiler (google::protobuf::compiler::Importer) from a list
// of import directories, as protoc's --proto_path does.
class ProtoFileDescriptorSource : public DescriptorSource {
 public:
  // `proto_files` are names relative to one of `proto_paths` (or paths inside one of them); an
  // empty `proto_paths` means the current directory. InvalidArgument with protoc-style messages
  // when a file does not parse.
  static Result<std::unique_ptr<ProtoFileDescriptorSource>> Load(
      const std::vector<std::string>& proto_files, const std::vector<std::string>& proto_paths);
  Result<const google::protobuf::ServiceDescriptor*> FindService(
      const std::string& full_name) override;

 private:
  ProtoFileDescriptorSource() = default;

  google::protobuf::compiler::DiskSourceTree source_tree_;
  // Collects the parser's messages into the error Load() returns.
  std::unique_ptr<google::protobuf::compiler::MultiFileErrorCollector> errors_;
  // Declared after the tree and collector it uses; built in Load().
  std::unique_ptr<google::protobuf::compiler::Importer> importer_;
  std::vector<const google::protobuf::FileDescriptor*> files_;
};

}  // namespace rrpc::server
