#include "rpc/discovery/etcd_resolver.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpc/discovery/etcd-test-util.h"
#include "rpc/discovery/etcd_client.h"
#include "rpc/discovery/etcd_registration.h"
#include "rpc/discovery/resolver-test-util.h"

namespace rrpc::rpc {
namespace {

class EtcdResolverTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.Start().ok()); }
  void TearDown() override {
    if (resolver_) resolver_->Stop();
  }
  void StartResolver(const std::string& prefix = "kv") {
    auto r = NewResolver("etcd://" + etcd_.endpoint() + "/" + prefix);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    resolver_ = std::move(*r);
    ASSERT_TRUE(resolver_->Start(recorder_.Listener()).ok());
  }

  EtcdTestServer etcd_;
  UpdateRecorder recorder_;
  std::unique_ptr<Resolver> resolver_;
};

TEST_F(EtcdResolverTest, ListsThePrefixThenFollowsPutsAndDeletes) {
  EtcdClient etcd = etcd_.Client();
  ASSERT_TRUE(etcd.Put("/kv/127.0.0.1:7001", "127.0.0.1:7001", 0).ok());
  ASSERT_TRUE(etcd.Put("/kv2/127.0.0.1:7009", "127.0.0.1:7009", 0).ok());  // another prefix
  StartResolver();
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  ASSERT_TRUE(etcd.Put("/kv/127.0.0.1:7002", "127.0.0.1:7002", 0).ok());
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.1:7002"}));
  ASSERT_TRUE(etcd.Delete("/kv/127.0.0.1:7001").ok());
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7002"}));
  ASSERT_TRUE(etcd.Put("/kv/bad", "not an address", 0).ok());  // skipped, logged
  ASSERT_TRUE(etcd.Delete("/kv/127.0.0.1:7002").ok());
  EXPECT_TRUE(recorder_.WaitForSet({}));
}

TEST_F(EtcdResolverTest, UsesTheMemberThatAnswers) {
  EtcdClient etcd = etcd_.Client();
  ASSERT_TRUE(etcd.Put("/kv/127.0.0.1:7001", "127.0.0.1:7001", 0).ok());
  // The first endpoint refuses connections (nothing listens on port 1).
  auto r = NewResolver("etcd://127.0.0.1:1," + etcd_.endpoint() + "/kv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  resolver_ = std::move(*r);
  ASSERT_TRUE(resolver_->Start(recorder_.Listener()).ok());
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  ASSERT_TRUE(etcd.Put("/kv/127.0.0.1:7002", "127.0.0.1:7002", 0).ok());
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.1:7002"}));
}

TEST_F(EtcdResolverTest, KeepsItsSetWhileEtcdIsDownAndRecoversWhenItReturns) {
  EtcdClient etcd = etcd_.Client();
  ASSERT_TRUE(etcd.Put("/kv/127.0.0.1:7001", "127.0.0.1:7001", 0).ok());
  StartResolver();
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001"}));
  etcd_.Kill();
  // An error update, and no set (empty or other) before it: the receiver keeps its last.
  ASSERT_TRUE(recorder_.WaitFor([](const Result<std::vector<Sockaddr>>& u) {
    EXPECT_FALSE(u.ok()) << "a set came while etcd was down";
    return !u.ok();
  }));
  ASSERT_TRUE(etcd_.Restart().ok());
  ASSERT_TRUE(etcd.Put("/kv/127.0.0.1:7002", "127.0.0.1:7002", 0).ok());
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.1:7001", "127.0.0.1:7002"}));
}

TEST_F(EtcdResolverTest, RegisteredServerAppearsAndWithdrawnOneDisappears) {
  StartResolver("svc/kv");
  ASSERT_TRUE(recorder_.WaitForSet({}));
  EtcdRegistrationOptions opts;
  opts.target = "etcd://" + etcd_.endpoint() + "/svc/kv";
  opts.address = "127.0.0.1:7050";
  opts.ttl = MonoDelta::FromSeconds(3);
  EtcdRegistration reg(opts);
  ASSERT_TRUE(reg.Start().ok());
  EXPECT_EQ("/svc/kv/127.0.0.1:7050", reg.key());
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7050"}, MonoDelta::FromSeconds(10)));
  ASSERT_TRUE(reg.Withdraw().ok());
  EXPECT_TRUE(recorder_.WaitForSet({}, MonoDelta::FromSeconds(10)));
}

TEST_F(EtcdResolverTest, RegistrationOutlivesItsTtlAndComesBackWhenDeletedOrItsLeaseIsLost) {
  StartResolver("svc");
  EtcdRegistrationOptions opts;
  opts.target = "etcd://" + etcd_.endpoint() + "/svc";
  opts.address = "127.0.0.1:7051";
  opts.ttl = MonoDelta::FromSeconds(3);
  EtcdRegistration reg(opts);
  ASSERT_TRUE(reg.Start().ok());
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7051"}));
  // Twice the TTL later the key is still there: the lease was renewed.
  WakeFd().WaitFor(MonoDelta::FromSeconds(6));
  EXPECT_EQ(0u, recorder_.pending());
  EtcdClient etcd = etcd_.Client();
  Result<EtcdClient::KeyValue> kv = etcd.Get(reg.key());
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_TRUE(reg.registered());
  // Someone deletes the key: it is put back at the next renewal.
  ASSERT_TRUE(etcd.Delete(reg.key()).ok());
  ASSERT_TRUE(recorder_.WaitForSet({}));
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7051"}));
  // The lease is revoked (as when it expired): the server registers again under a new one.
  ASSERT_TRUE(etcd.LeaseRevoke(kv->lease).ok());
  ASSERT_TRUE(recorder_.WaitForSet({}));
  ASSERT_TRUE(recorder_.WaitForSet({"127.0.0.1:7051"}));
  kv = etcd.Get(reg.key());
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_NE(0, kv->lease);
}

TEST(EtcdTargetTest, MalformedTargetsAreRefusedWithTheReason) {
  for (const char* bad : {"etcd://", "etcd://127.0.0.1:2379", "etcd://127.0.0.1:2379/",
                          "etcd:///prefix", "etcd://127.0.0.1/prefix", "etcd://h:99999/p"}) {
    auto r = NewResolver(bad);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << bad << ": " << r.status().ToString();
  }
  auto parsed = ParseEtcdTarget("etcd://a:1,b:2/svc/kv", "a:1,b:2/svc/kv");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(2u, parsed->endpoints.size());
  EXPECT_EQ("/svc/kv/", parsed->prefix);
}

TEST(EtcdRegistrationTest, MalformedOptionsAreRefused) {
  EtcdRegistrationOptions opts;
  opts.target = "dns:///x:1";
  opts.address = "127.0.0.1:1";
  EXPECT_TRUE(EtcdRegistration(opts).Start().IsInvalidArgument());
  opts.target = "etcd://127.0.0.1:2379/p";
  opts.address = "nohostport";
  EXPECT_TRUE(EtcdRegistration(opts).Start().IsInvalidArgument());
  opts.address = "127.0.0.1:1";
  opts.ttl = MonoDelta::FromSeconds(1);
  EXPECT_TRUE(EtcdRegistration(opts).Start().IsInvalidArgument());
}

}  // namespace
}  // namespace rrpc::rpc
