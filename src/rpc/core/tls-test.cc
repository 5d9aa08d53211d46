// TLS on the RPC port, end to end: calls (with sidecars, many of them) over TLS, the policies and
// their errors, certificate checks (wrong CA, expired, SAN mismatch), mutual TLS and tokens as
// the handler sees them, authorization, and reload. Certificates are made at test time.
#include <gtest/gtest.h>

#include <thread>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/messenger_security.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/tls-test-util.h"
#include "rrpc/rpc/authorization.h"

namespace rrpc::rpc {
namespace {

class TlsTest : public TlsTestBase {
 protected:
  // The client connection's transport, as /connections shows it.
  std::string ClientTransport() {
    for (const ConnectionInfo& c : client_->DumpConnections()) {
      if (c.direction == "client") return c.transport;
    }
    return "none";
  }
};

TEST_F(TlsTest, CallsTravelOverTlsWithSidecarsAndManyCalls) {
  StartServer(ServerOptions());
  StartClient(ClientOptions());
  CallerIdentity seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* ctx) { seen = ctx->caller(); });
  ASSERT_TRUE(Echo("hello").ok());
  EXPECT_EQ(ClientTransport(), "tls");
  EXPECT_TRUE(seen.encrypted);
  EXPECT_EQ(seen.method, AuthMethod::kNone);
  service_->set_echo_hook(nullptr);

  // A sidecar larger than a TLS record and the read block: many records, several SSL_reads.
  std::string big(300 * 1024, 'x');
  for (size_t i = 0; i < big.size(); i++) big[i] = static_cast<char>('a' + i % 26);
  rtest::EchoRequestPB req;
  req.set_data("with sidecar");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.AddOutboundSidecar(Slice(big));
  ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  ASSERT_EQ(ctl.num_inbound_sidecars(), 1u);
  EXPECT_EQ(ctl.inbound_sidecar(0).ToString(), big);

  // Many calls from several threads, batched on few connections.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; i++) {
        if (!Echo("call " + std::to_string(t) + "/" + std::to_string(i)).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(TlsTest, MutualTlsUserIsSeenByTheHandler) {
  StartServer(ServerOptions());
  MessengerOptions client = ClientOptions();
  client.security.certificate_file = alice_.certificate;
  client.security.private_key_file = alice_.private_key;
  StartClient(client);
  CallerIdentity seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* ctx) { seen = ctx->caller(); });
  ASSERT_TRUE(Echo("hi").ok());
  EXPECT_EQ(seen.user, "alice");
  EXPECT_EQ(seen.method, AuthMethod::kCertificate);
  EXPECT_TRUE(seen.encrypted);
}

TEST_F(TlsTest, ClientCertificateFromAnotherCaIsRefused) {
  StartServer(ServerOptions());
  security::CertFiles mallory = other_ca_.Issue(dir_, "mallory", Spec("mallory"));
  MessengerOptions client = ClientOptions();
  client.security.certificate_file = mallory.certificate;
  client.security.private_key_file = mallory.private_key;
  StartClient(client);
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("unknown ca"), std::string::npos) << s.ToString();
  EXPECT_EQ(service_->calls(), 0);
}

TEST_F(TlsTest, ServerFromAnotherCaIsRefusedByTheClient) {
  StartServer(ServerOptions());
  MessengerOptions client = ClientOptions();
  client.security.ca_certificate_file = other_ca_file_;
  StartClient(client);
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("certificate verify failed"), std::string::npos) << s.ToString();
}

TEST_F(TlsTest, ExpiredServerCertificateIsRefused) {
  security::CertSpec spec = Spec("server", {}, {"127.0.0.1"});
  spec.not_before = -7200;
  spec.not_after = -3600;
  server_cert_ = ca_.Issue(dir_, "expired", spec);
  StartServer(ServerOptions());
  StartClient(ClientOptions());
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("certificate has expired"), std::string::npos) << s.ToString();
}

TEST_F(TlsTest, ServerCertificateForAnotherAddressOrNameIsRefused) {
  server_cert_ = ca_.Issue(dir_, "elsewhere", Spec("server", {"db.example"}, {"10.1.2.3"}));
  StartServer(ServerOptions());
  StartClient(ClientOptions());  // checks 127.0.0.1 against the IP SANs
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("IP address mismatch"), std::string::npos) << s.ToString();

  client_->Shutdown();
  MessengerOptions named = ClientOptions();
  named.security.server_name = "kv.example";
  StartClient(named);
  s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("hostname mismatch"), std::string::npos) << s.ToString();

  client_->Shutdown();
  named.security.server_name = "db.example";  // the name it carries
  StartClient(named);
  EXPECT_TRUE(Echo("hi").ok());
}

TEST_F(TlsTest, PlaintextClientAgainstRequiredGetsAClearError) {
  MessengerOptions server = ServerOptions();
  server.security.encryption = SecurityPolicy::kRequired;
  StartServer(server);
  StartClient();  // no CA: plain TCP
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("requires TLS (rpc_encryption=required)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(service_->calls(), 0);
}

TEST_F(TlsTest, DefaultPolicyWithCertificateLetsOnlyLoopbackUsePlaintext) {
  StartServer(ServerOptions());  // encryption unset
  StartClient();
  ASSERT_TRUE(Echo("plain over loopback").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_TRUE(MessengerInternals::security(*server_)->PlaintextAllowedFrom(Sockaddr::Loopback(1)));
  auto remote = Sockaddr::Parse("192.0.2.7:1000");
  ASSERT_TRUE(remote.ok());
  EXPECT_FALSE(MessengerInternals::security(*server_)->PlaintextAllowedFrom(*remote));
}

TEST_F(TlsTest, TlsClientAgainstServerWithoutTlsFailsTheHandshake) {
  StartServer();  // no certificate: TLS disabled
  StartClient(ClientOptions());
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("handshake failure"), std::string::npos) << s.ToString();
}

TEST_F(TlsTest, RequiredEncryptionWithoutCertificateFailsAtListen) {
  MessengerOptions o;
  o.security.encryption = SecurityPolicy::kRequired;
  o.security.ca_certificate_file = ca_file_;
  auto m = MessengerBuilder(o).Build();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Status s = (*m)->Listen(Sockaddr::Loopback(0), nullptr);
  EXPECT_NE(s.ToString().find("rpc_encryption=required needs a certificate"), std::string::npos)
      << s.ToString();
}

TEST_F(TlsTest, TokenAuthenticatesOverTls) {
  StartServer(ServerOptions());
  MessengerOptions client = ClientOptions();
  client.security.auth_token = MintToken("bob", 3600);
  StartClient(client);
  CallerIdentity seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* ctx) { seen = ctx->caller(); });
  ASSERT_TRUE(Echo("hi").ok());
  EXPECT_EQ(seen.user, "bob");
  EXPECT_EQ(seen.method, AuthMethod::kToken);
}

TEST_F(TlsTest, ForgedAndExpiredTokensAreRefused) {
  StartServer(ServerOptions());
  std::string forged = MintToken("bob", 3600);
  forged[forged.size() - 1] = forged.back() == '0' ? '1' : '0';
  MessengerOptions client = ClientOptions();
  client.security.auth_token = forged;
  StartClient(client);
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("token signature does not verify"), std::string::npos)
      << s.ToString();

  client_->Shutdown();
  client.security.auth_token = MintToken("bob", -10);
  StartClient(client);
  s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("token expired"), std::string::npos) << s.ToString();
  EXPECT_EQ(service_->calls(), 0);
}

TEST_F(TlsTest, TokenSentWithoutTlsIsRefused) {
  StartServer(ServerOptions());  // loopback may use plaintext, but not to send a token
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.Write(BuildClientHello("raw", MintToken("bob", 3600)).slice.ToString()).ok());
  std::string frame;
  ASSERT_TRUE(raw.ReadFrame(&frame).ok());
  NegotiatePB reply;
  Status s = ParseServerReply(Slice(frame), &reply);
  EXPECT_NE(s.ToString().find("token sent without TLS"), std::string::npos) << s.ToString();

  // And our own client never sends it in plaintext: the token stays home, the call goes on
  // unauthenticated.
  MessengerOptions client;
  client.security.auth_token = MintToken("bob", 3600);
  StartClient(client);
  CallerIdentity seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* ctx) { seen = ctx->caller(); });
  ASSERT_TRUE(Echo("hi").ok());
  EXPECT_EQ(seen.method, AuthMethod::kNone);
  EXPECT_FALSE(seen.encrypted);
}

TEST_F(TlsTest, RequiredAuthenticationRefusesAnonymousClients) {
  MessengerOptions server = ServerOptions();
  server.security.authentication = SecurityPolicy::kRequired;
  StartServer(server);
  StartClient(ClientOptions());
  Status s = Echo("hi");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("rpc_authentication=required"), std::string::npos) << s.ToString();

  client_->Shutdown();
  MessengerOptions client = ClientOptions();
  client.security.certificate_file = alice_.certificate;
  client.security.private_key_file = alice_.private_key;
  StartClient(client);
  EXPECT_TRUE(Echo("hi").ok());
}

TEST_F(TlsTest, UnauthorizedMethodIsAnsweredNotAuthorizedWithoutRunningTheHandler) {
  MessengerOptions server = ServerOptions();
  auto policy = AllowedUsersAuthorizer::FromText(
      "# alice may echo, nobody may add\n"
      "rrpc.rtest.EchoService.Echo alice\n");
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  server.authorizer = std::move(policy).value();
  StartServer(server);
  MessengerOptions client = ClientOptions();
  client.security.certificate_file = alice_.certificate;
  client.security.private_key_file = alice_.private_key;
  StartClient(client);
  ASSERT_TRUE(Echo("allowed").ok());

  rtest::AddRequestPB req;
  req.set_a(1);
  req.set_b(2);
  rtest::AddResponsePB resp;
  RpcController ctl;
  Status s = Proxy().Add(req, &resp, &ctl);
  ASSERT_FALSE(s.ok());
  ASSERT_NE(ctl.error_response(), nullptr);
  EXPECT_EQ(ctl.error_response()->code(), ErrorStatusPB::ERROR_NOT_AUTHORIZED);
  EXPECT_NE(s.ToString().find("user 'alice' may not call rrpc.rtest.EchoService.Add"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(service_->calls(), 1);  // the Echo only

  // Anonymous callers match no user.
  client_->Shutdown();
  StartClient(ClientOptions());
  RpcController anon;
  s = Echo("anonymous", &anon);
  ASSERT_NE(anon.error_response(), nullptr) << s.ToString();
  EXPECT_EQ(anon.error_response()->code(), ErrorStatusPB::ERROR_NOT_AUTHORIZED);
  EXPECT_EQ(service_->calls(), 1);
}

TEST_F(TlsTest, ReloadTakesEffectForNewConnectionsOnly) {
  StartServer(ServerOptions());
  StartClient(ClientOptions());
  ASSERT_TRUE(Echo("before").ok());

  // The server's files now hold a certificate from the other CA.
  security::CertFiles next = other_ca_.Issue(dir_, "next", Spec("server", {}, {"127.0.0.1"}));
  std::ofstream(server_cert_.certificate) << std::ifstream(next.certificate).rdbuf();
  std::ofstream(server_cert_.private_key) << std::ifstream(next.private_key).rdbuf();
  ASSERT_TRUE(server_->ReloadSecurity().ok());

  // The open connection goes on with the old certificate.
  ASSERT_TRUE(Echo("same connection").ok());
  // A new client trusting the old CA is refused; one trusting the new CA gets in.
  std::shared_ptr<Messenger> old_client = client_;
  StartClient(ClientOptions());
  EXPECT_FALSE(Echo("new, old CA").ok());
  client_->Shutdown();
  MessengerOptions next_client = ClientOptions();
  next_client.security.ca_certificate_file = other_ca_file_;
  StartClient(next_client);
  EXPECT_TRUE(Echo("new, new CA").ok());
  old_client->Shutdown();

  // A broken file leaves the working context in place.
  std::ofstream(server_cert_.certificate) << "not a certificate";
  EXPECT_FALSE(server_->ReloadSecurity().ok());
  client_->Shutdown();
  StartClient(next_client);
  EXPECT_TRUE(Echo("after a failed reload").ok());
}

}  // namespace
}  // namespace rrpc::rpc
