// In-process tests of rrpc-cli's building blocks: method names, descriptors from .proto files and
// text-format requests (the end-to-end behaviour is in rrpc_cli-test.cc).
#include "server/tools/cli_call.h"

#include <google/protobuf/dynamic_message.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/tools/cli_descriptors.h"

namespace rrpc::server {
namespace {

namespace pb = google::protobuf;

// The roots holding rpc/testing/rtest.proto (src/) and what it imports (the public include/),
// set for every test by rrpc_tests().
std::string SourceDir() { return RRPC_SOURCE_DIR; }
std::vector<std::string> ProtoPaths() { return {RRPC_SOURCE_DIR, RRPC_PUBLIC_INCLUDE_DIR}; }

TEST(CliCallTest, ParsesDottedAndSlashedMethodNames) {
  auto dotted = ParseMethodName("rrpc.rtest.EchoService.Echo");
  ASSERT_TRUE(dotted.ok());
  EXPECT_EQ("rrpc.rtest.EchoService", dotted->service);
  EXPECT_EQ("Echo", dotted->method);
  auto slashed = ParseMethodName("rrpc.rtest.EchoService/Add");
  ASSERT_TRUE(slashed.ok());
  EXPECT_EQ("rrpc.rtest.EchoService", slashed->service);
  EXPECT_EQ("Add", slashed->method);
  for (const char* bad : {"Echo", ".Echo", "Service.", "Service/", ""}) {
    EXPECT_TRUE(ParseMethodName(bad).status().IsInvalidArgument()) << bad;
  }
}

TEST(CliCallTest, LoadsProtoFilesByVirtualNameOrDiskPath) {
  for (const std::string& file :
       {std::string("rpc/testing/rtest.proto"), SourceDir() + "/rpc/testing/rtest.proto"}) {
    SCOPED_TRACE(file);
    auto source = ProtoFileDescriptorSource::Load({file}, ProtoPaths());
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    auto echo = (*source)->FindService("rrpc.rtest.EchoService");
    ASSERT_TRUE(echo.ok()) << echo.status().ToString();
    EXPECT_EQ("rpc/testing/rtest.proto", (*echo)->file()->name());

    auto missing = (*source)->FindService("rrpc.rtest.Nope");
    EXPECT_TRUE(missing.status().IsNotFound());
    EXPECT_NE(std::string::npos, missing.status().message().find("rrpc.rtest.CalculatorService"))
        << missing.status().ToString();
  }
  auto absent = ProtoFileDescriptorSource::Load({"no/such.proto"}, ProtoPaths());
  EXPECT_TRUE(absent.status().IsInvalidArgument());
  EXPECT_NE(std::string::npos, absent.status().message().find("no/such.proto"));
}

TEST(CliCallTest, ResolvesMethodsAndParsesTextRequestsOfThem) {
  auto source = ProtoFileDescriptorSource::Load({"rpc/testing/rtest.proto"}, ProtoPaths());
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  auto add = ResolveMethod(source->get(), {"rrpc.rtest.EchoService", "Add"});
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  auto nope = ResolveMethod(source->get(), {"rrpc.rtest.EchoService", "Nope"});
  EXPECT_TRUE(nope.status().IsNotFound());
  EXPECT_NE(std::string::npos, nope.status().message().find("its methods: Echo, Add"));

  pb::DynamicMessageFactory factory;
  auto request = ParseTextRequest((*add)->input_type(), &factory, "a: 40\nb: 2");
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ("a: 40 b: 2", (*request)->ShortDebugString());

  auto partial = ParseTextRequest((*add)->input_type(), &factory, "a: 40");
  EXPECT_TRUE(partial.status().IsInvalidArgument());
  EXPECT_NE(std::string::npos, partial.status().message().find("missing required fields: b"))
      << partial.status().ToString();
  auto garbled = ParseTextRequest((*add)->input_type(), &factory, "a: 40\nb: x");
  EXPECT_TRUE(garbled.status().IsInvalidArgument());
  EXPECT_NE(std::string::npos, garbled.status().message().find("2:4:"))
      << garbled.status().ToString();
}

}  // namespace
}  // namespace rrpc::server
