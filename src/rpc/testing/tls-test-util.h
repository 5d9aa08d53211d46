// Test fixture for TLS: certificates made at test time (security/testing/test_certs.h) and
// messengers configured with them, on top of RpcTestBase's echo server and client.
#pragma once

#include <fstream>
#include <string>

#include "rpc/security/auth_token.h"
#include "rpc/security/ephemeral_certs.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {

class TlsTestBase : public RpcTestBase {
 protected:
  void SetUp() override {
    dir_ = security::MakeTempDir("rrpc-tls-test");
    ca_file_ = ca_.WriteCaCertificate(dir_, "ca");
    other_ca_file_ = other_ca_.WriteCaCertificate(dir_, "other-ca");
    server_cert_ = ca_.Issue(dir_, "server", Spec("server", {}, {"127.0.0.1"}));
    alice_ = ca_.Issue(dir_, "alice", Spec("alice"));
    token_key_file_ = dir_ + "/token.key";
    std::ofstream(token_key_file_) << "0123456789abcdef0123456789abcdef-test-key\n";
  }

  static security::CertSpec Spec(const std::string& cn, const std::vector<std::string>& dns = {},
                                 const std::vector<std::string>& ips = {}) {
    security::CertSpec spec;
    spec.common_name = cn;
    spec.dns_sans = dns;
    spec.ip_sans = ips;
    return spec;
  }

  // A server with the CA-signed certificate for 127.0.0.1 and the token key.
  MessengerOptions ServerOptions() {
    MessengerOptions o;
    o.security.certificate_file = server_cert_.certificate;
    o.security.private_key_file = server_cert_.private_key;
    o.security.ca_certificate_file = ca_file_;
    o.security.token_key_file = token_key_file_;
    return o;
  }
  // A client that trusts the CA (so it speaks TLS), without a certificate of its own.
  MessengerOptions ClientOptions() {
    MessengerOptions o;
    o.security.ca_certificate_file = ca_file_;
    return o;
  }
  std::string MintToken(const std::string& user, int64_t valid_for_seconds) {
    auto key = security::TokenKey::FromFile(token_key_file_);
    return key->Mint(user, security::UnixSecondsNow() + valid_for_seconds);
  }

  Status Echo(const std::string& data, RpcController* ctl = nullptr) {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController local;
    if (ctl == nullptr) ctl = &local;
    ctl->set_timeout(MonoDelta::FromSeconds(30));
    Status s = Proxy().Echo(req, &resp, ctl);
    if (s.ok() && resp.data() != data) return Status::Corruption("echo differs");
    return s;
  }

  security::EphemeralCa ca_{"rrpc-test-ca"};
  security::EphemeralCa other_ca_{"other-ca"};
  std::string dir_, ca_file_, other_ca_file_, token_key_file_;
  security::CertFiles server_cert_, alice_;
};

}  // namespace rrpc::rpc
