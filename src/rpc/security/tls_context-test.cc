#include "rpc/security/tls_context.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <fstream>

#include "rpc/security/ephemeral_certs.h"

namespace rrpc::security {
namespace {

class TlsContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("rrpc-tls-context-test");
    ca_file_ = ca_.WriteCaCertificate(dir_, "ca");
    CertSpec spec;
    spec.common_name = "server";
    spec.ip_sans = {"127.0.0.1"};
    server_ = ca_.Issue(dir_, "server", spec);
  }
  EphemeralCa ca_{"ca"};
  std::string dir_, ca_file_;
  CertFiles server_;
};

TEST_F(TlsContextTest, LoadsPemFilesAndMakesSessionsForBothRoles) {
  TlsContextOptions o;
  o.certificate_file = server_.certificate;
  o.private_key_file = server_.private_key;
  o.ca_certificate_file = ca_file_;
  auto ctx = TlsContext::Create(o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  auto server = (*ctx)->NewServerSsl();
  ASSERT_TRUE(server.ok());
  // Only modern protocols: nothing below TLS 1.2.
  EXPECT_EQ(SSL_get_min_proto_version(*server), TLS1_2_VERSION);
  EXPECT_NE(SSL_get_options(*server) & SSL_OP_NO_RENEGOTIATION, 0u);
  EXPECT_NE(SSL_get_options(*server) & SSL_OP_NO_COMPRESSION, 0u);
  SSL_free(*server);
  auto client = (*ctx)->NewClientSsl("", Sockaddr::Loopback(1));
  ASSERT_TRUE(client.ok());
  SSL_free(*client);
}

TEST_F(TlsContextTest, BadFilesGiveErrorsNamingThem) {
  TlsContextOptions o;
  o.certificate_file = dir_ + "/missing.crt";
  auto ctx = TlsContext::Create(o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.status().ToString().find("missing.crt"), std::string::npos);

  o.certificate_file = server_.certificate;
  o.private_key_file = ca_.Issue(dir_, "other", CertSpec()).private_key;
  ctx = TlsContext::Create(o);
  ASSERT_FALSE(ctx.ok());
  // OpenSSL notices the mismatch while loading the key ("key values mismatch").
  EXPECT_NE(ctx.status().ToString().find("other.key"), std::string::npos) << ctx.status();
  EXPECT_NE(ctx.status().ToString().find("mismatch"), std::string::npos) << ctx.status();
}

TEST_F(TlsContextTest, ReloadSwapsTheContextAndKeepsTheOldOneOnError) {
  TlsContextOptions o;
  o.certificate_file = server_.certificate;
  o.private_key_file = server_.private_key;
  auto ctx = TlsContext::Create(o);
  ASSERT_TRUE(ctx.ok());
  SSL* before = (*ctx)->NewServerSsl().value();
  ASSERT_TRUE((*ctx)->Reload().ok());
  EXPECT_EQ((*ctx)->generation(), 2);
  SSL* after = (*ctx)->NewServerSsl().value();
  EXPECT_NE(SSL_get_SSL_CTX(before), SSL_get_SSL_CTX(after));  // the old one lives on in `before`
  std::ofstream(server_.certificate) << "garbage";
  EXPECT_FALSE((*ctx)->Reload().ok());
  EXPECT_EQ((*ctx)->generation(), 2);
  SSL_free(before);
  SSL_free(after);
}

TEST_F(TlsContextTest, ClientWithoutCaAndServerWithoutCertificateAreRefused) {
  auto ctx = TlsContext::Create(TlsContextOptions());
  ASSERT_TRUE(ctx.ok());
  EXPECT_FALSE((*ctx)->NewServerSsl().ok());
  EXPECT_FALSE((*ctx)->NewClientSsl("", Sockaddr::Loopback(1)).ok());
}

}  // namespace
}  // namespace rrpc::security
