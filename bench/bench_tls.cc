#include "bench/bench_tls.h"

#include "rpc/security/ephemeral_certs.h"
#include "rpc/security/tls_context.h"

namespace rrpc::bench {

Result<std::string> ConfigureBenchTls(rpc::MessengerOptions* server, BenchConfig* config) {
  rpc::SecurityOptions& s = server->security;
  rpc::SecurityOptions& c = config->client_messenger.security;
  std::string source;
  if (s.certificate_file.empty() || s.ca_certificate_file.empty()) {
    const std::string dir = security::MakeTempDir("rpc-bench-tls");
    security::EphemeralCa ca("rpc-bench-ca");
    security::CertSpec spec;
    spec.common_name = "rpc-bench-server";
    spec.ip_sans = {"127.0.0.1", "::1"};
    security::CertFiles files = ca.Issue(dir, "server", spec);
    s.certificate_file = files.certificate;
    s.private_key_file = files.private_key;
    s.ca_certificate_file = ca.WriteCaCertificate(dir, "ca");
    source = "a throwaway CA and server certificate (EC P-256) in " + dir;
  } else {
    source = "--rpc_certificate_file " + s.certificate_file;
  }
  s.encryption = rpc::SecurityPolicy::kRequired;
  c.ca_certificate_file = s.ca_certificate_file;
  // The client does not present the server's certificate (no mutual TLS in the figures).
  c.certificate_file.clear();
  c.private_key_file.clear();
  RRPC_RETURN_NOT_OK(ConfigureBenchTlsClient(config));
  return "TLS with " + source;
}

Status ConfigureBenchTlsClient(BenchConfig* config) {
  rpc::SecurityOptions& c = config->client_messenger.security;
  if (c.ca_certificate_file.empty()) {
    return Status::InvalidArgument(
        "--transport=tls with --server_addr needs --rpc_ca_certificate_file (the CA that signed "
        "the server's certificate; --server_only prints where its throwaway one is)");
  }
  c.encryption = rpc::SecurityPolicy::kRequired;
  security::TlsContextOptions raw;
  raw.ca_certificate_file = c.ca_certificate_file;
  RRPC_ASSIGN_OR_RETURN(auto context, security::TlsContext::Create(raw));
  config->raw_client_tls = std::move(context);
  config->transport = "tls";
  return Status::OK();
}

}  // namespace rrpc::bench
