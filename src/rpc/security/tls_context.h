// TlsContext: the one place rrpc loads certificates, keys and CAs and turns them into OpenSSL
// sessions, for the RPC transports and the web UI alike. It holds one SSL_CTX built from PEM
// files with rrpc's fixed protocol settings (TLS 1.2 with ECDHE and AEAD ciphers, or TLS 1.3; no
// renegotiation, no compression) and hands out one SSL per connection, for either role.
//
// Reload() reads the files again and swaps in a new SSL_CTX: connections made afterwards use the
// new certificate, key and CA; open ones keep the context they were made with (each SSL holds a
// reference to its SSL_CTX). On error the old context stays.
//
// Thread-safe: NewServerSsl/NewClientSsl run on reactor threads, Reload on any thread (SIGHUP).
//
//   RRPC_ASSIGN_OR_RETURN(auto tls, TlsContext::Create(options));
//   RRPC_ASSIGN_OR_RETURN(SSL* ssl, tls->NewServerSsl());
#pragma once

#include <memory>
#include <string>

#include "rrpc/util/mutex.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace rrpc::security {

struct TlsContextOptions {
  // PEM: this side's certificate, leaf first then its chain. Empty: no certificate (a client
  // that does not use mutual TLS; a server needs one).
  std::string certificate_file;
  // PEM private key of that certificate; empty: read from certificate_file.
  std::string private_key_file;
  // PEM: the CAs trusted to sign peers' certificates. A client needs it to verify servers; a
  // server with one asks clients for a certificate (mutual TLS) and verifies what they present.
  std::string ca_certificate_file;
  // Server: ask clients for a certificate (only with a CA). A client that presents none still
  // connects (tokens or no authentication); one that presents a bad one is refused.
  bool request_client_certificate = true;
  // Server with a CA: refuse clients that present no certificate at all (the web UI's mutual
  // TLS; the RPC port leaves that to rpc_authentication, since tokens may stand in).
  bool require_client_certificate = false;
};

class TlsContext {
 public:
  // Loads the files; an error names the file and OpenSSL's reason.
  static Result<std::unique_ptr<TlsContext>> Create(TlsContextOptions options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // Reads the files again; new connections use them. Any thread.
  Status Reload();

  // A server session for one accepted connection. The caller owns it (SSL_free). Any thread.
  Result<SSL*> NewServerSsl() const;
  // A client session that verifies the server's chain against the CA and its certificate's
  // names: `server_name` (a DNS name, also sent as SNI) when not empty, otherwise the IP address
  // of `remote` against the certificate's IP SANs. The caller owns it. Any thread.
  Result<SSL*> NewClientSsl(const std::string& server_name, const Sockaddr& remote) const;

  const TlsContextOptions& options() const { return options_; }
  bool has_certificate() const { return !options_.certificate_file.empty(); }
  bool has_ca() const { return !options_.ca_certificate_file.empty(); }
  // How many times the files were loaded (1 after Create): for tests and /varz-like pages.
  int generation() const;

 private:
  explicit TlsContext(TlsContextOptions options) : options_(std::move(options)) {}
  // A new SSL_CTX from the files; the caller owns it.
  Result<SSL_CTX*> Build() const;
  // The current context with a reference the caller drops (SSL_CTX_free).
  SSL_CTX* AcquireCurrent() const;

  const TlsContextOptions options_;
  mutable Mutex mu_;
  SSL_CTX* ctx_ RRPC_GUARDED_BY(mu_) = nullptr;  // owned
  int generation_ RRPC_GUARDED_BY(mu_) = 0;
};

// OpenSSL's queued errors as one line (and clears them); "no OpenSSL error" when none.
std::string OpenSslErrors();

// The peer's verified certificate's user name, empty when there is none or it did not verify:
// the subject's common name, or else its first DNS, e-mail or URI SAN.
std::string VerifiedPeerUser(SSL* ssl);

}  // namespace rrpc::security
