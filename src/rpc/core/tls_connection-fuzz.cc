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
// TLS client still gets its echo answered.
// Run with build-support/fuzz.sh; ctest replays fuzz-corpus/tls_connection-fuzz/.
#include <glog/logging.h>
#include <google/protobuf/stubs/logging.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "rpc/core/wire_codec.h"
#include "rpc/messenger.h"
#include "rpc/rpc_context.h"
#include "rpc/rpc_controller.h"
#include "rpc/rpc_header.pb.h"
#include "rpc/security/ephemeral_certs.h"
#include "rpc/testing/rtest.rrpc.h"
#include "rpc/transport/frame_format.h"
#include "util/fuzz_check.h"
#include "util/monotime.h"
#include "util/sockaddr.h"

namespace rrpc::rpc {
namespace {

// The token key the seeds' tokens are signed with (build-support/make-fuzz-seeds.py).
constexpr char kTokenKey[] = "rrpc-fuzz-token-key-0123456789abcdef";
constexpr int kTimeoutSeconds = 10;

class FuzzEchoService final : public rtest::EchoServiceIf {
 public:
  void Echo(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
            RpcContext* context) override {
    if (req->has_fail_with()) {
      context->RespondFailure(Status::IllegalState(req->fail_with()));
      return;
    }
    resp->set_data(req->data());
    context->RespondSuccess();
  }
  void Add(const rtest::AddRequestPB* req, rtest::AddResponsePB* resp,
           RpcContext* context) override {
    resp->set_sum(req->a() + req->b());
    context->RespondSuccess();
  }
};

struct Server {
  std::shared_ptr<Messenger> server;
  std::shared_ptr<Messenger> client;
  Sockaddr addr;
  SSL_CTX* tls = nullptr;    // the fuzz client's: verifies nothing, it only carries the input
  std::string client_hello;  // a real one, for the odd mode
};

std::string MakeClientHello(SSL_CTX* ctx) {
  SSL* ssl = SSL_new(ctx);
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rbio, wbio);
  SSL_set_connect_state(ssl);
  SSL_do_handshake(ssl);  // writes the hello, then wants the server's answer
  char* data = nullptr;
  const long n = BIO_get_mem_data(wbio, &data);
  std::string hello(data, static_cast<size_t>(n));
  SSL_free(ssl);
  return hello;
}

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
    options.num_reactors = 1;
    options.num_workers = 2;
    options.max_message_size = 1 << 20;
    options.security.certificate_file = cert.certificate;
    options.security.private_key_file = cert.private_key;
    options.security.ca_certificate_file = ca_file;
    options.security.token_key_file = dir + "/token.key";
    options.security.encryption = SecurityPolicy::kRequired;  // loopback plaintext refused too
    out->server = MessengerBuilder(options).Build().value();
    FUZZ_CHECK(out->server->RegisterService(std::make_unique<FuzzEchoService>()).ok());
    FUZZ_CHECK(out->server->Listen(Sockaddr::Loopback(0), &out->addr).ok());

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

// A blocking connection whose reads and writes give up after kTimeoutSeconds.
int Connect(const Sockaddr& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  timeval tv{kTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  FUZZ_CHECK(::connect(fd, addr.addr(), addr.addrlen()) == 0);
  return fd;
}

[[noreturn]] void Hang(const char* what) {
  fprintf(stderr, "server did not %s within %d s\n", what, kTimeoutSeconds);
  abort();
}

// Raw mode: writes the bytes, shuts the write side, reads until the server closes.
void ExchangeRaw(const Sockaddr& addr, const std::string& bytes) {
  const int fd = Connect(addr);
  // The server may close early (a refusal): a failed send is fine, a blocked one is not.
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + written, bytes.size() - written, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) Hang("read the input");
      break;
    }
    written += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) Hang("close the connection");
    break;  // closed or reset
  }
  ::close(fd);
}

// The server only ever sends whole, well-formed response frames (the last one may be cut short
// by the close).
void CheckResponses(const std::string& bytes) {
  size_t pos = 0;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  while (bytes.size() - pos >= kFrameLengthSize) {
    const uint32_t length = DecodeBigEndian32(p + pos);
    FUZZ_CHECK(length > 0);
    if (bytes.size() - pos - kFrameLengthSize < length) break;
    ResponseHeader header;
    Slice body, tail;
    FUZZ_CHECK(ParseFrame(Slice(p + pos + kFrameLengthSize, length), &header, &body, &tail).ok());
    pos += kFrameLengthSize + length;
  }
}

bool TimedOut(SSL* ssl, int ret) {
  const int err = SSL_get_error(ssl, ret);
  return err == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// TLS mode: handshake, the bytes as plaintext, close_notify and the write side shut, then reads
// until the server closes; checks what it sent.
void ExchangeInsideTls(Server* s, const std::string& plaintext) {
  const int fd = Connect(s->addr);
  SSL* ssl = SSL_new(s->tls);
  SSL_set_fd(ssl, fd);
  int ret = SSL_connect(ssl);
  if (ret != 1) {
    if (TimedOut(ssl, ret)) Hang("finish the TLS handshake");
    fprintf(stderr, "TLS handshake with the server failed\n");
    abort();  // the server must take a plain client's handshake
  }
  size_t written = 0;
  while (written < plaintext.size()) {
    ret = SSL_write(ssl, plaintext.data() + written, static_cast<int>(plaintext.size() - written));
    if (ret <= 0) {
      if (TimedOut(ssl, ret)) Hang("read the input");
      break;  // the server closed early (a refusal)
    }
    written += static_cast<size_t>(ret);
  }
  SSL_shutdown(ssl);  // close_notify: the end of the input
  ::shutdown(fd, SHUT_WR);
  std::string received;
  char buf[16384];
  while (true) {
    ret = SSL_read(ssl, buf, sizeof(buf));
    if (ret > 0) {
      received.append(buf, static_cast<size_t>(ret));
      continue;
    }
    if (TimedOut(ssl, ret)) Hang("close the connection");
    break;  // close_notify, EOF or reset
  }
  SSL_free(ssl);
  ERR_clear_error();
  ::close(fd);
  CheckResponses(received);
}

void CheckStillServes(Server* s) {
  rtest::EchoServiceProxy proxy(s->client, s->addr);
  rtest::EchoRequestPB req;
  req.set_data("still there?");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(kTimeoutSeconds));
  Status st = proxy.Echo(req, &resp, &ctl);
  if (!st.ok()) {
    fprintf(stderr, "server stopped serving: %s\n", st.ToString().c_str());
    abort();
  }
  FUZZ_CHECK(resp.data() == "still there?");
}

}  // namespace
}  // namespace rrpc::rpc

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Hostile input makes the server log every bad frame; a fuzz run wants none of it.
  FLAGS_minloglevel = 3;
  google::InitGoogleLogging("tls_connection-fuzz");
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
    rrpc::rpc::ExchangeRaw(s->addr, s->client_hello + rest.substr(1));
  } else {
    rrpc::rpc::ExchangeRaw(s->addr, rest);
  }
  if (inputs++ % 16 == 0) rrpc::rpc::CheckStillServes(s);
  return 0;
}
