// Tokens minted outside rrpc: security/mint_token.py, written from docs/security.md's "Token
// format" with Python's hmac module, mints tokens that a real server (TLS, the token key file)
// accepts, byte for byte the same as TokenKey::Mint; tampered and expired ones are refused.
// Skipped when python3 is missing.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <string>

#include "rpc/testing/tls-test-util.h"

namespace rrpc::rpc {
namespace {

class TokenInteropTest : public TlsTestBase {
 protected:
  // mint_token.py's output for these arguments (its trailing newline dropped); "" if it failed.
  std::string PythonMint(const std::string& user, int64_t expires_unix_seconds) {
    const std::string command = "python3 '" + std::string(RRPC_SOURCE_DIR) +
                                "/rpc/security/mint_token.py' '" + token_key_file_ + "' '" + user +
                                "' " + std::to_string(expires_unix_seconds);
    FILE* out = popen(command.c_str(), "r");
    if (out == nullptr) return "";
    std::string token;
    char buf[256];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), out)) > 0) token.append(buf, n);
    const int status = pclose(out);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return "";
    while (!token.empty() && token.back() == '\n') token.pop_back();
    return token;
  }

  void SetUp() override {
    TlsTestBase::SetUp();
    if (system("python3 -c 'import hmac, hashlib' >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "python3 not found";
    }
  }

  // Echo as a client holding `token`; the caller the handler saw in `*seen`.
  Status EchoWithToken(const std::string& token, CallerIdentity* seen) {
    MessengerOptions client = ClientOptions();
    client.security.auth_token = token;
    if (client_ != nullptr) client_->Shutdown();
    StartClient(client);
    service_->set_echo_hook(
        [seen](const rtest::EchoRequestPB&, RpcContext* ctx) { *seen = ctx->caller(); });
    return Echo("hi");
  }
};

TEST_F(TokenInteropTest, PythonMintedTokenIsAcceptedAndEqualsOurs) {
  const int64_t expires = security::UnixSecondsNow() + 3600;
  const std::string token = PythonMint("carol@example", expires);
  ASSERT_FALSE(token.empty());
  EXPECT_EQ(security::TokenKey::FromFile(token_key_file_)->Mint("carol@example", expires), token);

  StartServer(ServerOptions());
  CallerIdentity seen;
  Status s = EchoWithToken(token, &seen);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("carol@example", seen.user);
  EXPECT_EQ(AuthMethod::kToken, seen.method);
}

TEST_F(TokenInteropTest, TamperedOrExpiredPythonTokensAreRefused) {
  StartServer(ServerOptions());
  CallerIdentity seen;
  // Another user's hex under carol's MAC.
  const int64_t expires = security::UnixSecondsNow() + 3600;
  const std::string carol = PythonMint("carol", expires);
  const std::string mallory = PythonMint("mallory", expires);
  ASSERT_FALSE(carol.empty());
  ASSERT_FALSE(mallory.empty());
  const std::string tampered =
      mallory.substr(0, mallory.rfind('.')) + carol.substr(carol.rfind('.'));
  Status s = EchoWithToken(tampered, &seen);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("token signature does not verify"))
      << s.ToString();

  const std::string expired = PythonMint("carol", security::UnixSecondsNow() - 10);
  ASSERT_FALSE(expired.empty());
  s = EchoWithToken(expired, &seen);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("token expired")) << s.ToString();
  EXPECT_EQ(0, service_->calls());
}

}  // namespace
}  // namespace rrpc::rpc
