// rdma-check says plainly what it finds: on this machine (no NIC) that there is no device, and
// on the software backend a working loopback round trip.
#include "rpc/rdma/rdma_check.h"

#include <gtest/gtest.h>

namespace rrpc::rdma {
namespace {

TEST(RdmaCheckTest, TheSoftwareBackendPassesTheLoopback) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.backend = RdmaBackend::kSoft;
  RdmaCheckResult r = RunRdmaCheck(o);
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_NE(r.report.find("loopback round trip: ok"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("locked-memory limit"), std::string::npos) << r.report;
}

TEST(RdmaCheckTest, WithoutADeviceItSaysSo) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.backend = RdmaBackend::kVerbs;
  if (OpenVerbsDevice(o.verbs).ok()) GTEST_SKIP() << "this machine has an RDMA device";
  RdmaCheckResult r = RunRdmaCheck(o);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.report.find("no RDMA device") != std::string::npos ||
              r.report.find("libibverbs.so.1 not found") != std::string::npos)
      << r.report;
  EXPECT_NE(r.report.find("loopback: not run"), std::string::npos) << r.report;
}

}  // namespace
}  // namespace rrpc::rdma
