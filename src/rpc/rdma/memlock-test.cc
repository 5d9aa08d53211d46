// The locked-memory limit made plain: the warning at open and the error of a refused
// registration (the software backend refuses beyond its modelled limit as ibv_reg_mr does).
#include "rpc/rdma/memlock.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "rpc/rdma/rdma_factory.h"
#include "rpc/rdma/soft/soft_device.h"

namespace rrpc::rdma {
namespace {

TEST(MemlockTest, WarnsWithThePerConnectionFigureWhenTheLimitHoldsFewConnections) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.endpoint.buffer_size = 16 * 1024;
  o.endpoint.receive_buffers = 64;
  o.endpoint.spare_receive_buffers = 16;
  o.endpoint.send_buffers = 64;  // 144 x 16 KiB = 2304 KiB per connection
  const std::string w = MemlockWarningFor(o, 8ull << 20);
  EXPECT_NE(w.find("8 MiB"), std::string::npos) << w;
  EXPECT_NE(w.find("room for 3 connection(s) pinning 2304 KiB each"), std::string::npos) << w;
  EXPECT_NE(w.find("ulimit -l"), std::string::npos) << w;
  EXPECT_NE(w.find("LimitMEMLOCK"), std::string::npos) << w;
  EXPECT_EQ(MemlockWarningFor(o, kUnlimitedMemlock), "");
  EXPECT_EQ(MemlockWarningFor(o, 1ull << 40), "");
}

TEST(MemlockTest, SrqModeCountsPerReactor) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.use_srq = true;
  o.srq.max_memory = 64ull << 20;
  const std::string w = MemlockWarningFor(o, 64 * 1024);
  EXPECT_NE(w.find("room for 0 reactor(s)"), std::string::npos) << w;
}

TEST(MemlockTest, ARefusedRegistrationNamesTheLimitAndHowToRaiseIt) {
  for (int err : {ENOMEM, EPERM}) {
    const std::string m = RegistrationError(err, 1 << 20, 64 * 1024).ToString();
    EXPECT_NE(m.find("ulimit -l"), std::string::npos) << m;
    EXPECT_NE(m.find("LimitMEMLOCK"), std::string::npos) << m;
    EXPECT_NE(m.find("64 KiB"), std::string::npos) << m;
  }
  EXPECT_EQ(RegistrationError(EINVAL, 1, 1).ToString().find("ulimit"), std::string::npos);
}

// Finding 6 of issue 37: with no locked-memory limit an ENOMEM is not the limit's doing; the
// error must not send the operator to raise it.
TEST(MemlockTest, EnomemUnderAnUnlimitedMemlockDoesNotBlameTheLimit) {
  const std::string m = RegistrationError(ENOMEM, 1 << 20, kUnlimitedMemlock).ToString();
  EXPECT_EQ(m.find("ulimit"), std::string::npos) << m;
  EXPECT_EQ(m.find("RLIMIT_MEMLOCK"), std::string::npos) << m;
  EXPECT_NE(m.find("no locked-memory limit"), std::string::npos) << m;
}

TEST(MemlockTest, TheSoftwareBackendRefusesRegistrationBeyondItsLimit) {
  SoftDeviceOptions so;
  so.locked_memory_limit = 64 * 1024;
  auto dev = OpenSoftDevice(so).value();
  auto pd = dev->AllocPd().value();
  std::vector<uint8_t> mem(48 * 1024);
  auto first = pd->RegisterMemory(mem.data(), mem.size());
  ASSERT_TRUE(first.ok());
  auto second = pd->RegisterMemory(mem.data(), mem.size());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().ToString().find("ulimit -l"), std::string::npos);
  first->reset();  // deregistered: the pages are unpinned
  EXPECT_TRUE(pd->RegisterMemory(mem.data(), mem.size()).ok());
}

}  // namespace
}  // namespace rrpc::rdma
