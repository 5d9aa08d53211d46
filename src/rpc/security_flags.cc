// The --rpc_* security flags (docs/security.md): TLS files, policies, tokens, authorization. In a
// file of their own so a client binary's --help lists them without the server knobs.
#include <gflags/gflags.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "rrpc/rpc/authorization.h"
#include "rrpc/rpc/messenger_flags.h"

DEFINE_string(rpc_certificate_file, "",
              "PEM file with this process's TLS certificate (leaf first, then its chain). A server "
              "needs one to accept TLS; a client presents it for mutual TLS.");
DEFINE_string(rpc_private_key_file, "",
              "PEM file with the private key of --rpc_certificate_file (empty: in that file).");
DEFINE_string(rpc_ca_certificate_file, "",
              "PEM file with the CAs that sign peers' certificates. A client needs it to verify "
              "servers (and then uses TLS); a server with one asks clients for certificates.");
DEFINE_string(rpc_tls_server_name, "",
              "Client: the DNS name servers' certificates must carry (also sent as SNI). Empty: "
              "each server's certificate must carry the IP address connected to.");
DEFINE_string(rpc_encryption, "",
              "disabled, optional or required. Empty (default): disabled without certificate or "
              "CA; a server with a certificate requires TLS from all but loopback peers; a client "
              "with a CA uses TLS.");
DEFINE_string(rpc_authentication, "optional",
              "disabled, optional or required: whether a server requires connections to "
              "authenticate with a client certificate or a token (required needs TLS).");
DEFINE_string(rpc_token_key_file, "",
              "Server: file with the HMAC-SHA256 key (at least 32 bytes) that signs authentication "
              "tokens; empty: tokens are refused. rrpc-cli mint-token makes tokens with it.");
DEFINE_string(rpc_auth_token_file, "",
              "Client: file holding the authentication token to present (sent only over TLS).");
DEFINE_string(rpc_authorization_file, "",
              "Server: allowed users per method, one rule per line: '<Service.Method|Service.*|*> "
              "<user>[,<user>...]'. A method no rule covers is refused (ERROR_NOT_AUTHORIZED). "
              "Empty: every authenticated or anonymous caller may call every method.");

namespace {
bool ValidatePolicy(const char* flag, const std::string& value) {
  if (value.empty() && std::string(flag) == "rpc_encryption") return true;
  if (rrpc::rpc::ParseSecurityPolicy(value).ok()) return true;
  fprintf(stderr, "--%s must be disabled, optional or required, not '%s'\n", flag, value.c_str());
  return false;
}
}  // namespace
DEFINE_validator(rpc_encryption, &ValidatePolicy);
DEFINE_validator(rpc_authentication, &ValidatePolicy);

namespace rrpc::rpc {

namespace {
// Startup configuration a binary cannot run without: a clear message and exit.
[[noreturn]] void ExitWithFlagError(const std::string& message) {
  fprintf(stderr, "%s\n", message.c_str());
  exit(1);
}

std::string ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) ExitWithFlagError("cannot read --rpc_auth_token_file " + path);
  std::string token;
  in >> token;  // one word; surrounding whitespace and newlines dropped
  return token;
}
}  // namespace

SecurityOptions SecurityOptionsFromFlags() {
  SecurityOptions security;
  security.certificate_file = FLAGS_rpc_certificate_file;
  security.private_key_file = FLAGS_rpc_private_key_file;
  security.ca_certificate_file = FLAGS_rpc_ca_certificate_file;
  security.server_name = FLAGS_rpc_tls_server_name;
  if (!FLAGS_rpc_encryption.empty()) {
    security.encryption = ParseSecurityPolicy(FLAGS_rpc_encryption).value();
  }
  security.authentication = ParseSecurityPolicy(FLAGS_rpc_authentication).value();
  security.token_key_file = FLAGS_rpc_token_key_file;
  if (!FLAGS_rpc_auth_token_file.empty()) {
    security.auth_token = ReadTokenFile(FLAGS_rpc_auth_token_file);
  }
  return security;
}

std::shared_ptr<const Authorizer> AuthorizerFromFlags() {
  if (FLAGS_rpc_authorization_file.empty()) return nullptr;
  auto policy = AllowedUsersAuthorizer::FromFile(FLAGS_rpc_authorization_file);
  if (!policy.ok()) ExitWithFlagError("--rpc_authorization_file: " + policy.status().ToString());
  return std::move(policy).value();
}

}  // namespace rrpc::rpc
