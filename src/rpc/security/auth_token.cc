#include "rpc/security/auth_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <charconv>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

namespace rrpc::security {

namespace {

constexpr char kPrefix[] = "rrpc1";

std::string Hex(const unsigned char* data, size_t len) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (size_t i = 0; i < len; i++) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

bool Unhex(const std::string& hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

std::vector<std::string> SplitDots(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

}  // namespace

int64_t UnixSecondsNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<TokenKey> TokenKey::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read token key file", path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string secret = buf.str();
  while (!secret.empty() &&
         (secret.back() == '\n' || secret.back() == '\r' || secret.back() == ' ')) {
    secret.pop_back();
  }
  Result<TokenKey> key = FromSecret(std::move(secret));
  if (!key.ok()) return key.status().CloneAndPrepend(path);
  return key;
}

Result<TokenKey> TokenKey::FromSecret(std::string secret) {
  if (secret.size() < kMinKeyBytes) {
    return Status::InvalidArgument("token key of " + std::to_string(secret.size()) +
                                   " bytes; need at least " + std::to_string(kMinKeyBytes));
  }
  return TokenKey(std::move(secret));
}

std::string TokenKey::Mac(const std::string& signed_part) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size(), mac, &len);
  return Hex(mac, len);
}

std::string TokenKey::Mint(const std::string& user, int64_t expires_unix_seconds) const {
  const std::string signed_part =
      std::string(kPrefix) + "." + std::to_string(expires_unix_seconds) + "." +
      Hex(reinterpret_cast<const unsigned char*>(user.data()), user.size());
  return signed_part + "." + Mac(signed_part);
}

Result<TokenClaims> TokenKey::Verify(const std::string& token, int64_t now_unix_seconds) const {
  if (token.size() > kMaxTokenBytes) return Status::InvalidArgument("token too long");
  const std::vector<std::string> parts = SplitDots(token);
  if (parts.size() != 4 || parts[0] != kPrefix) {
    return Status::InvalidArgument("malformed token");
  }
  const std::string signed_part = parts[0] + "." + parts[1] + "." + parts[2];
  const std::string mac = Mac(signed_part);
  if (mac.size() != parts[3].size() ||
      CRYPTO_memcmp(mac.data(), parts[3].data(), mac.size()) != 0) {
    return Status::InvalidArgument("token signature does not verify (forged, or another key)");
  }
  TokenClaims claims;
  const char* end = parts[1].data() + parts[1].size();
  auto [ptr, ec] = std::from_chars(parts[1].data(), end, claims.expires_unix_seconds);
  if (ec != std::errc() || ptr != end) return Status::InvalidArgument("malformed token expiry");
  if (!Unhex(parts[2], &claims.user) || claims.user.empty()) {
    return Status::InvalidArgument("malformed token user");
  }
  if (claims.expires_unix_seconds <= now_unix_seconds) {
    return Status::InvalidArgument("token expired " +
                                   std::to_string(now_unix_seconds - claims.expires_unix_seconds) +
                                   " s ago");
  }
  return claims;
}

}  // namespace rrpc::security
