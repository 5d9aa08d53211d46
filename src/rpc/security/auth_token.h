// Signed authentication tokens for clients without certificates: the server (or a tool holding
// the same key file) mints "rrpc1.<expiry>.<user in hex>.<HMAC-SHA256 in hex>", the client sends
// it during negotiation (over TLS only: a token is a bearer secret), the server checks the MAC
// and the expiry and takes the user from it. docs/security.md says how to mint and rotate them.
//
// Immutable once made: thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "rrpc/util/status.h"

namespace rrpc::security {

struct TokenClaims {
  std::string user;
  int64_t expires_unix_seconds = 0;
};

class TokenKey {
 public:
  // Keys shorter than this are refused: HMAC-SHA256's strength needs 32 random bytes.
  static constexpr size_t kMinKeyBytes = 32;
  // Longest token accepted, checked before any parsing.
  static constexpr size_t kMaxTokenBytes = 1024;

  // The key is the file's bytes (trailing newline and spaces dropped).
  static Result<TokenKey> FromFile(const std::string& path);
  static Result<TokenKey> FromSecret(std::string secret);

  // A token for `user` valid until `expires_unix_seconds`.
  std::string Mint(const std::string& user, int64_t expires_unix_seconds) const;
  // The token's claims if its MAC is ours and it has not expired at `now_unix_seconds`;
  // NotAuthorized-like errors (InvalidArgument) otherwise, saying which check failed.
  Result<TokenClaims> Verify(const std::string& token, int64_t now_unix_seconds) const;

 private:
  explicit TokenKey(std::string secret) : secret_(std::move(secret)) {}
  std::string Mac(const std::string& signed_part) const;

  std::string secret_;
};

// Seconds since the Unix epoch, for token expiries.
int64_t UnixSecondsNow();

}  // namespace rrpc::security
