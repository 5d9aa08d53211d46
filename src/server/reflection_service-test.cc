// Tests of ReflectionService: what it lists and which descriptors it returns, in process and over
// a real loopback RPC, for the RPC tests' services and for a hand-built file graph with imports.
#include "rrpc/server/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/server/reflection.rrpc.h"

namespace rrpc::server {
namespace {

namespace pb = google::protobuf;

// A service whose descriptor lives in a pool the test builds, to exercise imports.
class PoolService : public rpc::ServiceIf {
 public:
  PoolService(std::string name, const pb::ServiceDescriptor* descriptor)
      : name_(std::move(name)), descriptor_(descriptor) {}
  const std::string& service_name() const override { return name_; }
  const pb::ServiceDescriptor* service_descriptor() const override { return descriptor_; }

 private:
  const std::string name_;
  const pb::ServiceDescriptor* const descriptor_;
};

pb::FileDescriptorProto ParseFile(const std::string& text) {
  pb::FileDescriptorProto proto;
  CHECK(pb::TextFormat::ParseFromString(text, &proto)) << text;
  return proto;
}

std::vector<std::string> FileNames(const GetFileDescriptorsResponsePB& resp) {
  std::vector<std::string> names;
  for (const std::string& bytes : resp.file_descriptor_protos()) {
    pb::FileDescriptorProto proto;
    EXPECT_TRUE(proto.ParseFromString(bytes));
    names.push_back(proto.name());
  }
  return names;
}

class ReflectionServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A diamond: top imports left and right, which both import base.
    for (const char* text : {
             R"(name: "g/base.proto" package: "g" message_type { name: "Base" })",
             R"(name: "g/left.proto" package: "g" dependency: "g/base.proto"
                message_type { name: "Left" field { name: "b" number: 1 label: LABEL_OPTIONAL
                  type: TYPE_MESSAGE type_name: ".g.Base" } })",
             R"(name: "g/right.proto" package: "g" dependency: "g/base.proto"
                message_type { name: "Right" })",
             R"(name: "g/top.proto" package: "g" dependency: "g/left.proto"
                dependency: "g/right.proto"
                service { name: "Top" method { name: "Go" input_type: ".g.Left"
                  output_type: ".g.Right" } })",
             R"(name: "g/unused.proto" package: "g" message_type { name: "Unused" })",
         }) {
      ASSERT_NE(nullptr, pool_.BuildFile(ParseFile(text)));
    }
    auto built = rpc::MessengerBuilder("server").Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    server_ = std::move(built).value();
    ASSERT_TRUE(server_->RegisterService(std::make_unique<rpc::TestEchoService>()).ok());
    ASSERT_TRUE(server_
                    ->RegisterService(
                        std::make_unique<PoolService>("g.Top", pool_.FindServiceByName("g.Top")))
                    .ok());
    ASSERT_TRUE(
        server_->RegisterService(std::make_unique<PoolService>("opaque.Service", nullptr)).ok());
    auto reflection = MakeReflectionService(server_.get());
    reflection_ = static_cast<ReflectionService*>(reflection.get());
    ASSERT_TRUE(server_->RegisterService(std::move(reflection)).ok());
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    if (server_) server_->Shutdown();
  }

  pb::DescriptorPool pool_;
  std::shared_ptr<rpc::Messenger> server_;
  std::shared_ptr<rpc::Messenger> client_;
  ReflectionService* reflection_ = nullptr;
};

TEST_F(ReflectionServiceTest, ListsEveryRegisteredServiceSortedWithItsMethods) {
  ListServicesResponsePB resp;
  reflection_->CollectServices(&resp);
  ASSERT_EQ(4, resp.services_size()) << resp.DebugString();
  EXPECT_EQ("g.Top", resp.services(0).name());
  EXPECT_EQ("opaque.Service", resp.services(1).name());
  EXPECT_FALSE(resp.services(1).has_file());
  EXPECT_EQ(0, resp.services(1).methods_size());
  const ServiceSummaryPB& echo = resp.services(2);
  EXPECT_EQ("rrpc.rtest.EchoService", echo.name());
  EXPECT_EQ("rpc/testing/rtest.proto", echo.file());
  ASSERT_EQ(2, echo.methods_size());
  EXPECT_EQ("Echo", echo.methods(0));
  EXPECT_EQ("Add", echo.methods(1));
  EXPECT_EQ("rrpc.server.ServerReflection", resp.services(3).name());
  EXPECT_EQ("rrpc/server/reflection.proto", resp.services(3).file());
}

TEST_F(ReflectionServiceTest, ReturnsImportsBeforeImportersEachOnce) {
  GetFileDescriptorsRequestPB req;
  req.set_service("g.Top");
  GetFileDescriptorsResponsePB resp;
  ASSERT_TRUE(reflection_->CollectFileDescriptors(req, &resp).ok());
  std::vector<std::string> names = FileNames(resp);
  ASSERT_EQ(4u, names.size());
  EXPECT_EQ("g/base.proto", names[0]);
  EXPECT_EQ("g/top.proto", names[3]);
  // A fresh pool builds them in the order given: each file's imports came before it.
  pb::DescriptorPool rebuilt;
  for (const std::string& bytes : resp.file_descriptor_protos()) {
    pb::FileDescriptorProto proto;
    ASSERT_TRUE(proto.ParseFromString(bytes));
    ASSERT_NE(nullptr, rebuilt.BuildFile(proto)) << proto.name();
  }
  const pb::ServiceDescriptor* top = rebuilt.FindServiceByName("g.Top");
  ASSERT_NE(nullptr, top);
  EXPECT_EQ("g.Left", top->method(0)->input_type()->full_name());
}

TEST_F(ReflectionServiceTest, FindsImportedFilesByNameButNotUnrelatedOnes) {
  GetFileDescriptorsRequestPB req;
  req.set_file("g/left.proto");
  GetFileDescriptorsResponsePB resp;
  ASSERT_TRUE(reflection_->CollectFileDescriptors(req, &resp).ok());
  EXPECT_EQ((std::vector<std::string>{"g/base.proto", "g/left.proto"}), FileNames(resp));

  req.set_file("g/unused.proto");  // in the pool, but no served service uses it
  resp.Clear();
  Status s = reflection_->CollectFileDescriptors(req, &resp);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
}

TEST_F(ReflectionServiceTest, RejectsUnknownServicesAndAmbiguousRequests) {
  GetFileDescriptorsResponsePB resp;
  GetFileDescriptorsRequestPB req;
  EXPECT_TRUE(reflection_->CollectFileDescriptors(req, &resp).IsInvalidArgument());
  req.set_service("rrpc.rtest.EchoService");
  req.set_file("rpc/testing/rtest.proto");
  EXPECT_TRUE(reflection_->CollectFileDescriptors(req, &resp).IsInvalidArgument());
  req.clear_file();
  req.set_service("no.Such");
  EXPECT_TRUE(reflection_->CollectFileDescriptors(req, &resp).IsNotFound());
  req.set_service("opaque.Service");
  EXPECT_TRUE(reflection_->CollectFileDescriptors(req, &resp).IsNotFound());
}

TEST_F(ReflectionServiceTest, ServesTheTestServicesDescriptorsOverRpc) {
  Sockaddr addr;
  ASSERT_TRUE(server_->Listen(Sockaddr::Loopback(0), &addr).ok());
  auto built = rpc::MessengerBuilder("client").Build();
  ASSERT_TRUE(built.ok());
  client_ = std::move(built).value();
  ServerReflectionProxy proxy(client_, addr);

  ListServicesResponsePB list;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(proxy.ListServices(ListServicesRequestPB(), &list, &ctl).ok());
  EXPECT_EQ(4, list.services_size());

  GetFileDescriptorsRequestPB req;
  req.set_service("rrpc.rtest.EchoService");
  GetFileDescriptorsResponsePB resp;
  ctl.Reset();
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(proxy.GetFileDescriptors(req, &resp, &ctl).ok()) << ctl.status().ToString();
  // rtest.proto imports rrpc/rpc/rrpc_options.proto, which imports descriptor.proto: every file
  // comes, dependencies first, so a client can rebuild them in order.
  ASSERT_EQ(3, resp.file_descriptor_protos_size());
  pb::DescriptorPool rebuilt;
  for (const std::string& bytes : resp.file_descriptor_protos()) {
    pb::FileDescriptorProto proto;
    ASSERT_TRUE(proto.ParseFromString(bytes));
    ASSERT_NE(nullptr, rebuilt.BuildFile(proto)) << proto.name();
  }
  EXPECT_EQ("rpc/testing/rtest.proto",
            rebuilt.FindServiceByName("rrpc.rtest.EchoService")->file()->name());
  const pb::ServiceDescriptor* echo = rebuilt.FindServiceByName("rrpc.rtest.EchoService");
  ASSERT_NE(nullptr, echo);
  const pb::Descriptor* add_request = echo->FindMethodByName("Add")->input_type();
  EXPECT_EQ("rrpc.rtest.AddRequestPB", add_request->full_name());
  EXPECT_NE(nullptr, add_request->FindFieldByName("a"));

  req.set_service("no.Such");
  ctl.Reset();
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  Status s = proxy.GetFileDescriptors(req, &resp, &ctl);
  EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("no such service")) << s.ToString();
}

}  // namespace
}  // namespace rrpc::server
