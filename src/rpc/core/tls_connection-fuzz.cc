// Fuzz target: a TLS server connection fed arbitrary bytes. One messenger that requires TLS serves
// an echo service on loopback for the whole run (a certificate from a CA made at start-up, a
// token key). Byte 0 of the input picks what the fuzzer controls:
//   even: everything INSIDE TLS. The target completes a real TLS handshake with OpenSSL, then
//         writes the rest of the input as the connection's plaintext: rrpc's preamble, its
//         negotiation (with auth tokens, accepted only here), the transport's frame reading
//         through SSL_read, calls and responses. This is the part only rrpc's code parses.
//   odd:  the raw bytes on TCP, so the server's first-bytes detection decides: plaintext is refused
//         (TLS is required), a TLS record goes to the TLS transport with the bytes already read
//         replayed. When byte 1 is odd a real ClientHello comes first, so the fuzzed bytes arrive
//         after it, mid-handshake.
// OpenSSL's own record and handshake parsers are fuzzed upstream; the odd mode is here for rrpc's
// detection, replay and handshake-failure paths, not to fuzz OpenSSL (docs/reliability.md).
// Checks: the server never crashes; what it sends inside TLS is a sequence of well-formed
// response frames; it closes the connection within 10 s of the input's end; every 16 inputs a
// TLS client still gets its echo answered. A failed check prints why, with the server's last log
// lines (why it closed its recent connections). The fuzz client's socket is non-blocking, every
// wait a poll() against the exchange's deadline, so libFuzzer's SIGALRM cannot fail a handshake
// (rpc/testing/fuzzed-server.h).
// Run with build-support/fuzz.sh; ctest replays fuzz-corpus/tls_connection-fuzz/.
#include <google/protobuf/stubs/logging.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "rpc/security/ephemeral_certs.h"
#include "rpc/testing/fuzzed-server.h"
#include "rpc/testing/tls-client-hello.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "util/fuzz_check.h"

namespace rrpc::rpc {
namespace {

using fuzzing::CheckResponseFrames;
using fuzzing::Connect;
using fuzzing::Fail;
using fuzzing::kServerTimeoutSeconds;
using fuzzing::ServerLogTail;
using fuzzing::WaitUntilReady;

// The token key the seeds' tokens are signed with (build-support/make-fuzz-seeds.py).
constexpr char kTokenKey[] = "rrpc-fuzz-token-key-0123456789abcdef";

// What the process logged last (LLVMFuzzerInitialize installs it).
const ServerLogTail* s_tail = nullptr;

struct Server {
  std::shared_ptr<Messenger> server;
  std::shared_ptr<Messenger> client;
  Sockaddr addr;
  SSL_CTX* tls = nullptr;    // the fuzz client's: verifies nothing, it only carries the input
  std::string client_hello;  // a real one, for the odd mode
};

Server* TheServer() {
  static Server* s = [] {
    auto* out = new Server;  // lives for the process: libFuzzer exits without teardown
    static security::EphemeralCa ca("rrpc-fuzz-ca");
    const std::string dir = security::MakeTempDir("rrpc-tls-fuzz");
    security::CertSpec spec;
    spec.common_name = "server";
    spec.ip_sans = {"127.0.0.1"};
    const security::CertFiles cert = ca.Issue(dir, "server", spec);
    const std::string ca_file = ca.WriteCaCertificate(dir, "ca");
    std::ofstream(dir + "/token.key") << kTokenKey << "\n";

    MessengerOptions options;
    options.name = "fuzz-tls-server";
    options.security.certificate_file = cert.certificate;
    options.security.private_key_file = cert.private_key;
    options.security.ca_certificate_file = ca_file;
    options.security.token_key_file = dir + "/token.key";
    options.security.encryption = SecurityPolicy::kRequired;  // loopback plaintext refused too
    out->server = fuzzing::StartEchoServer(options, &out->addr);

    MessengerOptions client;
    client.name = "fuzz-tls-client";
    client.num_reactors = 1;
    client.security.ca_certificate_file = ca_file;
    out->client = MessengerBuilder(client).Build().value();

    out->tls = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(out->tls, SSL_VERIFY_NONE, nullptr);
    out->client_hello = MakeClientHello(out->tls);
    return out;
  }();
  return s;
}

const char* SslErrorName(int err) {
  switch (err) {
    case SSL_ERROR_SSL:
      return "SSL_ERROR_SSL";
    case SSL_ERROR_SYSCALL:
      return "SSL_ERROR_SYSCALL";
    case SSL_ERROR_ZERO_RETURN:
      return "SSL_ERROR_ZERO_RETURN";
    default:
      return "other";
  }
}

// Runs `op`, an SSL call on the non-blocking socket `fd`, until it no longer asks to wait for the
// socket; returns its last result, with *err its SSL_get_error and *sys_errno the errno it left.
template <typename Op>
int SslCall(SSL* ssl, int fd, MonoTime deadline, const char* server_did_not, Op op, int* err,
            int* sys_errno) {
  while (true) {
    ERR_clear_error();
    errno = 0;
    const int ret = op();
    *sys_errno = errno;
    *err = ret > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl, ret);
    if (*err == SSL_ERROR_WANT_READ) {
      WaitUntilReady(fd, POLLIN, deadline, server_did_not, s_tail);
    } else if (*err == SSL_ERROR_WANT_WRITE) {
      WaitUntilReady(fd, POLLOUT, deadline, server_did_not, s_tail);
    } else {
      return ret;
    }
  }
}

// TLS mode: handshake, the bytes as plaintext, close_notify and the write side shut, then reads
// until the server closes; checks what it sent.
void ExchangeInsideTls(Server* s, const std::string& plaintext) {
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(kServerTimeoutSeconds);
  const int fd = Connect(s->addr, deadline, s_tail);
  SSL* ssl = SSL_new(s->tls);
  SSL_set_fd(ssl, fd);
  int err, sys_errno;
  int ret = SslCall(
      ssl, fd, deadline, "finish the TLS handshake", [&] { return SSL_connect(ssl); }, &err,
      &sys_errno);
  if (ret != 1) {
    // The server must take a plain client's handshake, whatever came before.
    char openssl[256] = "none";
    if (ERR_peek_error() != 0) ERR_error_string_n(ERR_peek_error(), openssl, sizeof(openssl));
    Fail("TLS handshake with the server failed: " + std::string(SslErrorName(err)) +
             " (SSL_get_error " + std::to_string(err) + "), errno " + std::to_string(sys_errno) +
             " (" + strerror(sys_errno) + "), OpenSSL: " + openssl,
         s_tail);
  }
  size_t written = 0;
  while (written < plaintext.size()) {
    const int n = static_cast<int>(plaintext.size() - written);
    ret = SslCall(
        ssl, fd, deadline, "read the input",
        [&] { return SSL_write(ssl, plaintext.data() + written, n); }, &err, &sys_errno);
    if (ret <= 0) break;  // the server closed early (a refusal)
    written += static_cast<size_t>(ret);
  }
  // close_notify: the end of the input (0: sent, the server's not yet read).
  SslCall(
      ssl, fd, deadline, "read the input", [&] { return SSL_shutdown(ssl) >= 0 ? 1 : -1; }, &err,
      &sys_errno);
  ::shutdown(fd, SHUT_WR);
  std::string received;
  char buf[16384];
  while (true) {
    ret = SslCall(
        ssl, fd, deadline, "close the connection", [&] { return SSL_read(ssl, buf, sizeof(buf)); },
        &err, &sys_errno);
    if (ret <= 0) break;  // close_notify, EOF or reset
    received.append(buf, static_cast<size_t>(ret));
  }
  SSL_free(ssl);
  ERR_clear_error();
  ::close(fd);
  CheckResponseFrames(received);
}

}  // namespace
}  // namespace rrpc::rpc

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Hostile input makes the server log every bad frame: kept in memory, printed only when a check
  // fails.
  rrpc::rpc::s_tail = rrpc::rpc::ServerLogTail::Install("tls_connection-fuzz");
  google::protobuf::SetLogHandler(nullptr);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int inputs = 0;
  if (size < 1) return 0;
  rrpc::rpc::Server* s = rrpc::rpc::TheServer();
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    rrpc::rpc::ExchangeInsideTls(s, rest);
  } else if (size >= 2 && data[1] % 2 == 1) {
    rrpc::rpc::fuzzing::ExchangeRaw(s->addr, s->client_hello + rest.substr(1), rrpc::rpc::s_tail);
  } else {
    rrpc::rpc::fuzzing::ExchangeRaw(s->addr, rest, rrpc::rpc::s_tail);
  }
  if (inputs++ % 16 == 0) {
    rrpc::rpc::fuzzing::CheckStillServes(s->client, s->addr, rrpc::rpc::s_tail);
  }
  return 0;
}
