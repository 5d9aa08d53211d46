// docs/wire-format.md's streams section is enough to speak streams: a Python client written from
// it alone (stream_wire_client.py, python3-protobuf for the messages) drives a server stream and
// a client stream against a real server, respecting and granting credit by hand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/test-stream-service.h"

namespace rrpc::rpc {
namespace {

class StreamWireTest : public RpcTestBase {};

TEST_F(StreamWireTest, PythonClientFromTheDocsDrivesServerAndClientStreams) {
  extra_services_.push_back(std::make_unique<TestStreamService>());
  StartServer();
  const std::string command = std::string("/usr/bin/python3 ") + RRPC_SOURCE_DIR +
                              "/rpc/tests/stream_wire_client.py " +
                              std::to_string(server_addr_.port()) + " protoc " +
                              RRPC_PUBLIC_INCLUDE_DIR + " " + RRPC_SOURCE_DIR;
  const int rc = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(rc)) << command;
  EXPECT_EQ(0, WEXITSTATUS(rc)) << command;
}

}  // namespace
}  // namespace rrpc::rpc
