// The TLS port seen from outside: a real external client (openssl s_client) audits it, old
// protocols and plaintext-only suites are refused, and peers that misbehave inside the handshake
// (garbage after the ClientHello, a handshake stalled past the negotiation timeout, 200 of them
// stopping mid-handshake) lose only their own connection while a TLS client keeps being answered.
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/wait.h>

#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/tls-client-hello.h"
#include "rpc/testing/tls-test-util.h"

namespace rrpc::rpc {
namespace {

// A blocking TCP connection to `addr` (no reads bounded by a timeout: WaitForClose polls).
int ConnectRaw(const Sockaddr& addr) {
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, addr.addr(), addr.addrlen()) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads and drops what the server sends until it closes the connection (true), or 60 s pass.
bool WaitForClose(int fd) {
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(60);
  char buf[4096];
  while (MonoTime::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
  return false;
}

// Runs a shell command; its exit status and output (stdout and stderr).
int RunCommand(const std::string& command, std::string* output) {
  FILE* p = popen((command + " 2>&1 </dev/null").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class TlsAbuseTest : public TlsTestBase {
 protected:
  std::string SClient(const std::string& args, int* exit_code) {
    std::string out;
    *exit_code = RunCommand("timeout 30 openssl s_client -connect " + server_addr_.ToString() +
                                " -CAfile " + ca_file_ + " -verify_return_error -brief " + args,
                            &out);
    return out;
  }
};

TEST_F(TlsAbuseTest, OpenSslClientCompletesTls13AndTls12AndVerifiesTheChain) {
  StartServer(ServerOptions());
  int code;
  std::string out = SClient("-tls1_3", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("Protocol version: TLSv1.3"), std::string::npos) << out;
  EXPECT_NE(out.find("Verification: OK"), std::string::npos) << out;

  out = SClient("-tls1_2", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("Protocol version: TLSv1.2"), std::string::npos) << out;
  EXPECT_NE(out.find("Ciphersuite: ECDHE-"), std::string::npos) << out;
  EXPECT_NE(out.find("Verification: OK"), std::string::npos) << out;
}

TEST_F(TlsAbuseTest, OldProtocolsAndPlaintextOnlySuitesAreRefused) {
  StartServer(ServerOptions());
  // @SECLEVEL=0 lets the client offer what its defaults forbid, so the refusal is the server's.
  for (const char* args :
       {"-tls1 -cipher DEFAULT:@SECLEVEL=0", "-tls1_1 -cipher DEFAULT:@SECLEVEL=0",
        "-tls1_2 -cipher NULL-SHA256:eNULL:@SECLEVEL=0"}) {
    int code;
    std::string out = SClient(args, &code);
    EXPECT_NE(code, 0) << args << ": " << out;
    EXPECT_EQ(out.find("CONNECTION ESTABLISHED"), std::string::npos) << args << ": " << out;
    EXPECT_NE(out.find("alert"), std::string::npos) << args << ": " << out;
  }
  StartClient(ClientOptions());
  EXPECT_TRUE(Echo("still serving").ok());
}

TEST_F(TlsAbuseTest, GarbageAfterTheClientHelloClosesOnlyThatConnection) {
  StartServer(ServerOptions());
  StartClient(ClientOptions());
  ASSERT_TRUE(Echo("before").ok());
  int fd = ConnectRaw(server_addr_);
  ASSERT_GE(fd, 0);
  std::string garbage = MakeClientHello();
  garbage += std::string("\x17\x03\x03\x00\x20", 5) + std::string(32, 'g');  // a bogus record
  ASSERT_TRUE(SendAll(fd, garbage));
  EXPECT_TRUE(WaitForClose(fd));
  ::close(fd);
  EXPECT_TRUE(Echo("after").ok());
}

TEST_F(TlsAbuseTest, StalledHandshakeIsCutOffAtTheNegotiationTimeout) {
  MessengerOptions server = ServerOptions();
  server.negotiation_timeout = MonoDelta::FromMilliseconds(300);
  StartServer(server);
  StartClient(ClientOptions());
  ASSERT_TRUE(Echo("open").ok());
  int fd = ConnectRaw(server_addr_);
  ASSERT_GE(fd, 0);
  const std::string hello = MakeClientHello();
  ASSERT_TRUE(SendAll(fd, hello.substr(0, hello.size() / 2)));  // stops inside the hello
  for (int i = 0; i < 20; i++) ASSERT_TRUE(Echo("meanwhile").ok());
  EXPECT_TRUE(WaitForClose(fd));
  ::close(fd);
  EXPECT_TRUE(Echo("after").ok());
}

TEST_F(TlsAbuseTest, TwoHundredPeersStoppingMidHandshakeCloseOnlyThemselves) {
  MessengerOptions server = ServerOptions();
  server.negotiation_timeout = MonoDelta::FromMilliseconds(500);
  StartServer(server);
  StartClient(ClientOptions());
  ASSERT_TRUE(Echo("open").ok());
  const std::string hello = MakeClientHello();
  std::vector<int> fds;
  for (int i = 0; i < 200; i++) {
    int fd = ConnectRaw(server_addr_);
    ASSERT_GE(fd, 0);
    // The whole hello: the server answers and waits for our next flight, which never comes.
    ASSERT_TRUE(SendAll(fd, hello));
    fds.push_back(fd);
  }
  for (int i = 0; i < 50; i++) ASSERT_TRUE(Echo("meanwhile").ok());
  for (int fd : fds) {
    EXPECT_TRUE(WaitForClose(fd));
    ::close(fd);
  }
  EXPECT_TRUE(Echo("after").ok());
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().size() == 1; }));
}

}  // namespace
}  // namespace rrpc::rpc
