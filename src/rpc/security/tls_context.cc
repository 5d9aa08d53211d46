#include "rpc/security/tls_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace rrpc::security {

namespace {

// TLS 1.2 suites with forward secrecy and authenticated encryption only.
constexpr char kTls12Ciphers[] = "ECDHE+AESGCM:ECDHE+CHACHA20";
// TLS 1.3 suites in the server's order of preference: AES-128-GCM first (as strong as needed and
// faster than AES-256), then AES-256-GCM and ChaCha20-Poly1305 (for machines without AES-NI).
constexpr char kTls13Suites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
// Names the server's sessions for resumption; any fixed bytes do.
constexpr unsigned char kSessionIdContext[] = "rrpc";

}  // namespace

std::string OpenSslErrors() {
  std::string out;
  unsigned long err;
  while ((err = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error" : out;
}

Result<std::unique_ptr<TlsContext>> TlsContext::Create(TlsContextOptions options) {
  std::unique_ptr<TlsContext> context(new TlsContext(std::move(options)));
  RRPC_RETURN_NOT_OK(context->Reload());
  return context;
}

TlsContext::~TlsContext() {
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

Result<SSL_CTX*> TlsContext::Build() const {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return Status::RuntimeError("SSL_CTX_new failed", OpenSslErrors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // Renegotiation gives a peer a way to make us burn CPU mid-connection; compression leaks
  // plaintext through sizes (CRIME). The server picks the suite, so ours wins over a client's.
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // Read whole socket buffers, not one record header then one record body: two recv() per
  // record otherwise.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_session_id_context(ctx, kSessionIdContext, sizeof(kSessionIdContext) - 1);
  // Resumption by tickets (stateless, TLS 1.2 and 1.3): no server-side session store to bound.
  // The client mode lets a client keep a session for its next connection to the same server
  // (OpenSSL marks TLS 1.3 ticket sessions resumable only with client caching on).
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_BOTH | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  Status s;
  const std::string& cert = options_.certificate_file;
  const std::string& key = options_.private_key_file.empty() ? cert : options_.private_key_file;
  const std::string& ca = options_.ca_certificate_file;
  if (SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) != 1 ||
      SSL_CTX_set_ciphersuites(ctx, kTls13Suites) != 1) {
    s = Status::RuntimeError("cannot set the TLS cipher suites", OpenSslErrors());
  } else if (!cert.empty() && SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    s = Status::InvalidArgument("cannot load TLS certificate " + cert, OpenSslErrors());
  } else if (!cert.empty() &&
             SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    s = Status::InvalidArgument("cannot load TLS private key " + key, OpenSslErrors());
  } else if (!cert.empty() && SSL_CTX_check_private_key(ctx) != 1) {
    s = Status::InvalidArgument("TLS private key " + key + " does not match certificate " + cert);
  } else if (!ca.empty() && SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    s = Status::InvalidArgument("cannot load TLS CA certificates " + ca, OpenSslErrors());
  }
  if (!s.ok()) {
    SSL_CTX_free(ctx);
    return s;
  }
  if (!ca.empty()) {
    // Tells clients which CAs we accept their certificates from.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
  }
  return ctx;
}

Status TlsContext::Reload() {
  RRPC_ASSIGN_OR_RETURN(SSL_CTX * fresh, Build());
  SSL_CTX* old;
  {
    MutexLock lock(mu_);
    old = ctx_;
    ctx_ = fresh;
    generation_++;
  }
  // Sessions made from the old context hold their own reference to it.
  if (old != nullptr) SSL_CTX_free(old);
  return Status::OK();
}

int TlsContext::generation() const {
  MutexLock lock(mu_);
  return generation_;
}

SSL_CTX* TlsContext::AcquireCurrent() const {
  MutexLock lock(mu_);
  SSL_CTX_up_ref(ctx_);
  return ctx_;
}

Result<SSL*> TlsContext::NewServerSsl() const {
  if (!has_certificate()) {
    return Status::IllegalState("TLS server without a certificate (set the certificate file)");
  }
  SSL_CTX* ctx = AcquireCurrent();
  SSL* ssl = SSL_new(ctx);
  SSL_CTX_free(ctx);  // the SSL holds its own reference
  if (ssl == nullptr) return Status::RuntimeError("SSL_new failed", OpenSslErrors());
  if (has_ca() && options_.request_client_certificate) {
    // Asked, not demanded: a client may authenticate with a token instead. A certificate that
    // is presented must verify, or the handshake fails.
    SSL_set_verify(ssl,
                   SSL_VERIFY_PEER |
                       (options_.require_client_certificate ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                   nullptr);
  } else {
    SSL_set_verify(ssl, SSL_VERIFY_NONE, nullptr);
  }
  SSL_set_accept_state(ssl);
  return ssl;
}

Result<SSL*> TlsContext::NewClientSsl(const std::string& server_name,
                                      const Sockaddr& remote) const {
  if (!has_ca()) {
    return Status::IllegalState(
        "TLS client without a CA to verify servers with (set the CA certificate file)");
  }
  SSL_CTX* ctx = AcquireCurrent();
  SSL* ssl = SSL_new(ctx);
  SSL_CTX_free(ctx);
  if (ssl == nullptr) return Status::RuntimeError("SSL_new failed", OpenSslErrors());
  SSL_set_verify(ssl, SSL_VERIFY_PEER, nullptr);
  bool ok;
  if (!server_name.empty()) {
    ok = SSL_set1_host(ssl, server_name.c_str()) == 1 &&
         SSL_set_tlsext_host_name(ssl, server_name.c_str()) == 1;
  } else {
    ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), remote.host().c_str()) == 1;
  }
  if (!ok) {
    SSL_free(ssl);
    return Status::InvalidArgument("cannot verify TLS server name",
                                   server_name.empty() ? remote.host() : server_name);
  }
  SSL_set_connect_state(ssl);
  return ssl;
}

std::string VerifiedPeerUser(SSL* ssl) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return "";
  char cn[256];
  const int len =
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  if (len > 0) return std::string(cn, static_cast<size_t>(len));
  std::string user;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names) && user.empty(); i++) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type == GEN_DNS || name->type == GEN_EMAIL || name->type == GEN_URI) {
      const ASN1_IA5STRING* s = name->d.ia5;
      user.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                  static_cast<size_t>(ASN1_STRING_length(s)));
    }
  }
  GENERAL_NAMES_free(names);
  return user;
}

}  // namespace rrpc::security
