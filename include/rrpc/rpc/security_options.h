// SecurityOptions: TLS, authentication and their policies for a messenger, as plain values
// (docs/security.md). Part of MessengerOptions; binaries fill them from the --rpc_* flags.
//
//   options.security.certificate_file = "/etc/kv/server.crt";
//   options.security.private_key_file = "/etc/kv/server.key";
//   options.security.ca_certificate_file = "/etc/kv/ca.crt";
//   options.security.authentication = SecurityPolicy::kRequired;
#pragma once

#include <optional>
#include <string>

#include "rrpc/util/status.h"

namespace rrpc::rpc {

// How much of a feature (encryption, authentication) a messenger insists on.
enum class SecurityPolicy {
  kDisabled,  // never: a server refuses TLS ClientHellos; a client connects in plaintext
  kOptional,  // accepted when the peer offers it; a client uses TLS when it has a CA
  kRequired,  // connections without it are refused with an error naming the policy
};

// "disabled", "optional", "required".
const char* SecurityPolicyName(SecurityPolicy policy);
Result<SecurityPolicy> ParseSecurityPolicy(const std::string& text);

struct SecurityOptions {
  // PEM: this messenger's certificate (leaf first, then its chain) and private key (empty: in
  // the certificate file). A server needs one for TLS; a client presents it for mutual TLS.
  std::string certificate_file;
  std::string private_key_file;
  // PEM: the CAs that sign peers' certificates. A client needs it to verify servers; a server
  // with one asks clients for certificates (mutual TLS) and verifies those presented.
  std::string ca_certificate_file;
  // Client: the DNS name the servers' certificates must carry (also sent as SNI). Empty: each
  // server's certificate must carry the IP address connected to as an IP SAN.
  std::string server_name;
  // Unset: disabled without certificate or CA. With a certificate, a server requires TLS from
  // every peer but loopback ones (which may still use plaintext); with a CA, a client uses TLS.
  std::optional<SecurityPolicy> encryption;
  // Server: whether connections must authenticate (a verified client certificate, or a token).
  // Optional: unauthenticated connections get the empty user. Required needs TLS.
  SecurityPolicy authentication = SecurityPolicy::kOptional;
  // Server: the key that signs authentication tokens (security/auth_token.h); empty: tokens are
  // refused. At least 32 bytes.
  std::string token_key_file;
  // Client: the token sent during negotiation (only over TLS).
  std::string auth_token;
};

}  // namespace rrpc::rpc
