#include "rpc/security/auth_token.h"

#include <gtest/gtest.h>

namespace rrpc::security {
namespace {

const char kSecret[] = "0123456789abcdef0123456789abcdef";

TEST(AuthTokenTest, MintedTokenVerifiesToItsUserUntilItExpires) {
  TokenKey key = TokenKey::FromSecret(kSecret).value();
  const std::string token = key.Mint("alice.smith@example", 1000);
  auto claims = key.Verify(token, 999);
  ASSERT_TRUE(claims.ok()) << claims.status().ToString();
  EXPECT_EQ(claims->user, "alice.smith@example");
  EXPECT_EQ(claims->expires_unix_seconds, 1000);
  auto expired = key.Verify(token, 1000);
  ASSERT_FALSE(expired.ok());
  EXPECT_NE(expired.status().ToString().find("token expired"), std::string::npos);
}

TEST(AuthTokenTest, ForgedOrForeignOrMalformedTokensAreRefused) {
  TokenKey key = TokenKey::FromSecret(kSecret).value();
  TokenKey other = TokenKey::FromSecret(std::string(kSecret) + "other").value();
  const std::string token = key.Mint("alice", 1000);
  EXPECT_FALSE(other.Verify(token, 0).ok());
  // The user or the expiry changed without the key.
  std::string longer = token;
  longer.replace(longer.find(".1000."), 6, ".9999.");
  EXPECT_FALSE(key.Verify(longer, 0).ok());
  const std::string mallory = key.Mint("mallory", 1000);
  const std::string spliced =
      mallory.substr(0, mallory.rfind('.')) + token.substr(token.rfind('.'));
  EXPECT_FALSE(key.Verify(spliced, 0).ok());
  for (const char* bad : {"", "rrpc1", "rrpc1.x.y.z", "rrpc2.1.61.00", "a.b.c.d.e"}) {
    EXPECT_FALSE(key.Verify(bad, 0).ok()) << bad;
  }
  EXPECT_FALSE(key.Verify(std::string(5000, 'a'), 0).ok());
}

// docs/security.md's worked example ("Token format"), so the document and the code agree.
TEST(AuthTokenTest, MintsTheDocumentedExampleByteForByte) {
  TokenKey key = TokenKey::FromSecret("0123456789abcdef0123456789abcdef-test-key").value();
  EXPECT_EQ("rrpc1.1000.626f62.f4b3e14c21c9efe86143ef42a4798b7675fc64e69c654b98e6b1d188c90dc45c",
            key.Mint("bob", 1000));
}

TEST(AuthTokenTest, ShortKeysAreRefused) {
  EXPECT_FALSE(TokenKey::FromSecret("short").ok());
  EXPECT_FALSE(TokenKey::FromFile("/nonexistent/key").ok());
}

}  // namespace
}  // namespace rrpc::security
