// Certificates made on the spot with the OpenSSL API: a throwaway CA, and leaf certificates it
// signs with chosen names, SANs and validity, written as PEM files for TlsContext. EC P-256 keys
// (fast to make and to handshake with). For tests, and for rpc-bench --transport=tls when no
// certificate is given: never for a real deployment (docs/security.md says how to make those).
//
//   EphemeralCa ca("test-ca");
//   CertSpec spec;
//   spec.common_name = "server";
//   spec.ip_sans = {"127.0.0.1"};
//   CertFiles server = ca.Issue(dir, "server", spec);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

typedef struct evp_pkey_st EVP_PKEY;
typedef struct x509_st X509;

namespace rrpc::security {

struct CertSpec {
  std::string common_name;
  std::vector<std::string> dns_sans;
  std::vector<std::string> ip_sans;
  // Validity relative to now, in seconds (negative: in the past), e.g. both negative: expired.
  int64_t not_before = -3600;
  int64_t not_after = 24 * 3600;
};

struct CertFiles {
  std::string certificate;  // PEM certificate path
  std::string private_key;  // PEM key path
};

class EphemeralCa {
 public:
  // A self-signed CA named `name`.
  explicit EphemeralCa(const std::string& name);
  ~EphemeralCa();
  EphemeralCa(const EphemeralCa&) = delete;
  EphemeralCa& operator=(const EphemeralCa&) = delete;

  // Writes the CA's certificate to `dir`/`file_name`.crt and returns the path.
  std::string WriteCaCertificate(const std::string& dir, const std::string& file_name) const;
  // A certificate signed by this CA, as `dir`/`file_name`.crt and .key.
  CertFiles Issue(const std::string& dir, const std::string& file_name, const CertSpec& spec) const;

 private:
  EVP_PKEY* key_ = nullptr;
  X509* cert_ = nullptr;
};

// A fresh temporary directory (mkdtemp under $TEST_TMPDIR or /tmp).
std::string MakeTempDir(const std::string& prefix);

}  // namespace rrpc::security
