// Opening the libibverbs backend where it cannot work is a clean error, never a crash.
#include <gtest/gtest.h>

#include "rpc/rdma/ibv/verbs_ibv.h"

namespace rrpc::rdma {
namespace {

TEST(VerbsIbvOpenTest, OpeningWithoutADeviceIsACleanError) {
  if (VerbsLibraryAvailable()) {
    Result<std::unique_ptr<Context>> opened = OpenVerbsDevice({"no-such-device", 0, -1});
    EXPECT_TRUE(opened.status().IsNotFound()) << opened.status().ToString();
  } else {
    EXPECT_TRUE(OpenVerbsDevice().status().IsNotFound());
  }
}

}  // namespace
}  // namespace rrpc::rdma
