#include "rpc/core/messenger_security.h"

namespace rrpc::rpc {

Result<std::unique_ptr<MessengerSecurity>> MessengerSecurity::Create(
    const SecurityOptions& options) {
  std::unique_ptr<MessengerSecurity> sec(new MessengerSecurity(options));
  const bool has_files = !options.certificate_file.empty() || !options.ca_certificate_file.empty();
  const bool disabled = options.encryption == SecurityPolicy::kDisabled;
  if (has_files && !disabled) {
    security::TlsContextOptions tls;
    tls.certificate_file = options.certificate_file;
    tls.private_key_file = options.private_key_file;
    tls.ca_certificate_file = options.ca_certificate_file;
    tls.request_client_certificate = options.authentication != SecurityPolicy::kDisabled;
    RRPC_ASSIGN_OR_RETURN(auto context, security::TlsContext::Create(tls));
    sec->tls_ = std::move(context);
  }
  if (options.encryption.has_value()) {
    sec->server_encryption_ = *options.encryption;
    sec->client_uses_tls_ =
        *options.encryption == SecurityPolicy::kRequired ||
        (*options.encryption == SecurityPolicy::kOptional && !options.ca_certificate_file.empty());
  } else {
    // Unset: a server given a certificate requires TLS, except from loopback peers.
    const bool has_cert = !options.certificate_file.empty();
    sec->server_encryption_ = has_cert ? SecurityPolicy::kRequired : SecurityPolicy::kDisabled;
    sec->plaintext_from_loopback_ = has_cert;
    sec->client_uses_tls_ = !options.ca_certificate_file.empty();
  }
  if (sec->client_uses_tls_ && sec->tls_ == nullptr) {
    return Status::InvalidArgument(
        "rpc_encryption=required needs a CA certificate file to verify servers with");
  }
  if (!options.token_key_file.empty()) {
    RRPC_ASSIGN_OR_RETURN(security::TokenKey key,
                          security::TokenKey::FromFile(options.token_key_file));
    MutexLock lock(sec->mu_);
    sec->token_key_ = std::make_shared<const security::TokenKey>(std::move(key));
  }
  return sec;
}

Status MessengerSecurity::CheckServerReady() const {
  if (server_encryption_ != SecurityPolicy::kDisabled &&
      (tls_ == nullptr || !tls_->has_certificate())) {
    return Status::InvalidArgument(
        "rpc_encryption=" + std::string(SecurityPolicyName(server_encryption_)) +
        " needs a certificate and key (rpc_certificate_file)");
  }
  if (options_.authentication == SecurityPolicy::kRequired &&
      server_encryption_ == SecurityPolicy::kDisabled) {
    return Status::InvalidArgument(
        "rpc_authentication=required needs TLS (certificates and tokens travel only over TLS)");
  }
  return Status::OK();
}

Status MessengerSecurity::Reload() {
  std::shared_ptr<const security::TokenKey> key;
  if (!options_.token_key_file.empty()) {
    RRPC_ASSIGN_OR_RETURN(security::TokenKey k,
                          security::TokenKey::FromFile(options_.token_key_file));
    key = std::make_shared<const security::TokenKey>(std::move(k));
  }
  if (tls_ != nullptr) RRPC_RETURN_NOT_OK(tls_->Reload());
  MutexLock lock(mu_);
  if (key != nullptr) token_key_ = std::move(key);
  return Status::OK();
}

std::shared_ptr<const security::TokenKey> MessengerSecurity::token_key() const {
  MutexLock lock(mu_);
  return token_key_;
}

bool MessengerSecurity::PlaintextAllowedFrom(const Sockaddr& remote) const {
  if (server_encryption_ != SecurityPolicy::kRequired) return true;
  return plaintext_from_loopback_ && remote.IsLoopback();
}

bool MessengerSecurity::TlsAccepted() const {
  return server_encryption_ != SecurityPolicy::kDisabled && tls_ != nullptr &&
         tls_->has_certificate();
}

std::string MessengerSecurity::EncryptionPolicyText() const {
  std::string text = std::string("rpc_encryption=") + SecurityPolicyName(server_encryption_);
  if (plaintext_from_loopback_) text += " (the default with a certificate: loopback peers exempt)";
  return text;
}

}  // namespace rrpc::rpc
