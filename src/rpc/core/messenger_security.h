// MessengerSecurity: a messenger's SecurityOptions resolved once at start into what its
// connections apply: the TLS context (shared by every connection, reloadable), the token key, the
// effective policies of the server side and whether the client side speaks TLS.
// docs/security.md states the rules. Thread-safe: reactors read it, Reload() runs on any thread.
#pragma once

#include <memory>
#include <string>

#include "rpc/security/auth_token.h"
#include "rpc/security/tls_context.h"
#include "rrpc/rpc/security_options.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::rpc {

class MessengerSecurity {
 public:
  static Result<std::unique_ptr<MessengerSecurity>> Create(const SecurityOptions& options);

  // Reads certificate, key, CA and token key again; new connections use them. On error nothing
  // changes.
  Status Reload();
  // Listen() checks the server side can do what its policies demand.
  Status CheckServerReady() const;

  // nullptr when this messenger has no TLS at all.
  const std::shared_ptr<security::TlsContext>& tls() const { return tls_; }
  // nullptr when tokens are not accepted.
  std::shared_ptr<const security::TokenKey> token_key() const;

  // Server side: may a peer at `remote` skip TLS?
  bool PlaintextAllowedFrom(const Sockaddr& remote) const;
  // Server side: may a peer start TLS (a ClientHello)?
  bool TlsAccepted() const;
  // The server's encryption policy as an operator names it, for error messages.
  std::string EncryptionPolicyText() const;
  SecurityPolicy authentication() const { return options_.authentication; }

  // Client side.
  bool client_uses_tls() const { return client_uses_tls_; }
  const std::string& auth_token() const { return options_.auth_token; }
  const std::string& server_name() const { return options_.server_name; }

 private:
  explicit MessengerSecurity(const SecurityOptions& options) : options_(options) {}

  const SecurityOptions options_;
  std::shared_ptr<security::TlsContext> tls_;
  SecurityPolicy server_encryption_ = SecurityPolicy::kDisabled;
  bool plaintext_from_loopback_ = false;  // the default policy with a certificate
  bool client_uses_tls_ = false;
  mutable Mutex mu_;
  std::shared_ptr<const security::TokenKey> token_key_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rpc
