#include "rpc/security/ephemeral_certs.h"

#include <glog/logging.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <cstdio>

namespace rrpc::security {

namespace {

EVP_PKEY* NewKey() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  CHECK(key != nullptr) << "EC key generation failed";
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  CHECK(ext != nullptr) << "bad extension " << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key` with subject CN `cn`, signed by `issuer_key` (issuer `issuer`, or
// itself when null).
X509* MakeCert(EVP_PKEY* key, const CertSpec& spec, X509* issuer, EVP_PKEY* issuer_key,
               bool is_ca) {
  static long serial = 1;
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert), static_cast<long>(spec.not_before));
  X509_gmtime_adj(X509_getm_notAfter(cert), static_cast<long>(spec.not_after));
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  if (!spec.common_name.empty()) {
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1,
                               -1, 0);
  }
  X509_set_issuer_name(cert, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer != nullptr ? issuer : cert;
  if (is_ca) {
    AddExtension(cert, signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert, signer, NID_basic_constraints, "CA:FALSE");
    AddExtension(cert, signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  std::string sans;
  for (const auto& dns : spec.dns_sans) sans += (sans.empty() ? "DNS:" : ",DNS:") + dns;
  for (const auto& ip : spec.ip_sans) sans += (sans.empty() ? "IP:" : ",IP:") + ip;
  if (!sans.empty()) AddExtension(cert, signer, NID_subject_alt_name, sans);
  CHECK(X509_sign(cert, issuer_key, EVP_sha256()) > 0) << "X509_sign failed";
  return cert;
}

void WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = fopen(path.c_str(), "w");
  CHECK(f != nullptr) << "cannot write " << path;
  if (cert != nullptr) CHECK(PEM_write_X509(f, cert) == 1);
  if (key != nullptr) {
    CHECK(PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1);
  }
  fclose(f);
}

}  // namespace

EphemeralCa::EphemeralCa(const std::string& name) {
  key_ = NewKey();
  CertSpec spec;
  spec.common_name = name;
  spec.not_after = 10 * 24 * 3600;
  cert_ = MakeCert(key_, spec, nullptr, key_, /*is_ca=*/true);
}

EphemeralCa::~EphemeralCa() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

std::string EphemeralCa::WriteCaCertificate(const std::string& dir,
                                            const std::string& file_name) const {
  const std::string path = dir + "/" + file_name + ".crt";
  WritePem(path, cert_, nullptr);
  return path;
}

CertFiles EphemeralCa::Issue(const std::string& dir, const std::string& file_name,
                             const CertSpec& spec) const {
  EVP_PKEY* key = NewKey();
  X509* cert = MakeCert(key, spec, cert_, key_, /*is_ca=*/false);
  CertFiles files{dir + "/" + file_name + ".crt", dir + "/" + file_name + ".key"};
  WritePem(files.certificate, cert, nullptr);
  WritePem(files.private_key, nullptr, key);
  X509_free(cert);
  EVP_PKEY_free(key);
  return files;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + ".XXXXXX";
  CHECK(mkdtemp(templ.data()) != nullptr) << "mkdtemp " << templ;
  return templ;
}

}  // namespace rrpc::security
