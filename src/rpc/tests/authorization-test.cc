#include "rrpc/rpc/authorization.h"

#include <gtest/gtest.h>

#include "rrpc/rpc/security_options.h"

namespace rrpc::rpc {
namespace {

CallerIdentity User(const std::string& name) {
  CallerIdentity id;
  id.user = name;
  id.method = name.empty() ? AuthMethod::kNone : AuthMethod::kCertificate;
  return id;
}

TEST(AllowedUsersAuthorizerTest, MethodRuleThenServiceRuleThenWildcardDecide) {
  auto policy = AllowedUsersAuthorizer::FromText(
      "kv.Kv.Get  *          # any authenticated user\n"
      "kv.Kv.*    alice,ingest\n"
      "\n"
      "*          root\n");
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  const Authorizer& a = **policy;
  EXPECT_TRUE(a.Authorize(User("bob"), "kv.Kv", "Get").ok());
  EXPECT_FALSE(a.Authorize(User(""), "kv.Kv", "Get").ok());  // anonymous is nobody
  EXPECT_TRUE(a.Authorize(User("alice"), "kv.Kv", "Put").ok());
  EXPECT_FALSE(a.Authorize(User("bob"), "kv.Kv", "Put").ok());
  // The service rule decides for its methods: root is not in it.
  EXPECT_FALSE(a.Authorize(User("root"), "kv.Kv", "Put").ok());
  EXPECT_TRUE(a.Authorize(User("root"), "other.Svc", "Anything").ok());
  Status refused = a.Authorize(User("bob"), "other.Svc", "Anything");
  EXPECT_NE(refused.ToString().find("user 'bob' may not call other.Svc.Anything"),
            std::string::npos)
      << refused.ToString();
}

TEST(AllowedUsersAuthorizerTest, MethodsWithoutRuleAreRefusedAndBadLinesNamed) {
  auto empty = AllowedUsersAuthorizer::FromText("");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE((*empty)->Authorize(User("alice"), "kv.Kv", "Get").ok());
  auto bad = AllowedUsersAuthorizer::FromText("kv.Kv.Get alice\nkv.Kv.Put\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("line 2"), std::string::npos);
  EXPECT_FALSE(AllowedUsersAuthorizer::FromFile("/nonexistent/acl").ok());
}

TEST(AuthorizationTest, RequireAuthenticatedAndPolicyNames) {
  RequireAuthenticatedAuthorizer a;
  EXPECT_TRUE(a.Authorize(User("x"), "s", "m").ok());
  EXPECT_FALSE(a.Authorize(User(""), "s", "m").ok());
  EXPECT_EQ(ParseSecurityPolicy("required").value(), SecurityPolicy::kRequired);
  EXPECT_FALSE(ParseSecurityPolicy("yes").ok());
  EXPECT_STREQ(SecurityPolicyName(SecurityPolicy::kOptional), "optional");
  EXPECT_STREQ(AuthMethodName(AuthMethod::kToken), "token");
}

}  // namespace
}  // namespace rrpc::rpc
