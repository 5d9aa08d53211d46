// Authorization: who called (CallerIdentity) and whether they may call a method (Authorizer).
// A messenger checks every call against its service's authorizer, or the messenger-wide one
// (MessengerOptions::authorizer), after routing and before queueing: a refused call is answered
// ERROR_NOT_AUTHORIZED and its handler never runs. AllowedUsersAuthorizer is the built-in
// policy: a list of users per method, from a file or from code.
//
//   auto policy = AllowedUsersAuthorizer::FromFile("/etc/kv/acl");   // "kv.KvService.Put
//   alice,bob" options.authorizer = std::move(policy).value();
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "rrpc/util/status.h"

namespace rrpc::rpc {

enum class AuthMethod {
  kNone,         // not authenticated: the user is empty
  kCertificate,  // mutual TLS: the user is the certificate's subject CN (or first SAN)
  kToken,        // a signed token sent during negotiation
};
const char* AuthMethodName(AuthMethod method);

// Who is at the other end of a server connection; fixed by its negotiation.
struct CallerIdentity {
  std::string user;  // empty when not authenticated
  AuthMethod method = AuthMethod::kNone;
  bool encrypted = false;  // the connection runs over TLS
};

class Authorizer {
 public:
  virtual ~Authorizer() = default;
  // Whether `caller` may call service.method: OK, or why not (sent to the caller with
  // ERROR_NOT_AUTHORIZED). Runs on a reactor thread for every call: must be quick and must not
  // block. Thread-safe.
  virtual Status Authorize(const CallerIdentity& caller, const std::string& service,
                           const std::string& method) const = 0;
};

// Allowed users per method. A rule names "Service.Method" or "Service.*" (every method of the
// service) or "*" (every method) and the users allowed; "*" as a user allows everyone
// authenticated. A method no rule covers is refused. Immutable once built: thread-safe.
class AllowedUsersAuthorizer final : public Authorizer {
 public:
  AllowedUsersAuthorizer() = default;
  // One rule per line: "<method pattern> <user>[,<user>...]"; '#' starts a comment.
  static Result<std::unique_ptr<AllowedUsersAuthorizer>> FromFile(const std::string& path);
  static Result<std::unique_ptr<AllowedUsersAuthorizer>> FromText(const std::string& text);
  // Before use: allows `users` on `pattern`.
  void Allow(const std::string& pattern, const std::unordered_set<std::string>& users);

  Status Authorize(const CallerIdentity& caller, const std::string& service,
                   const std::string& method) const override;

 private:
  std::unordered_map<std::string, std::unordered_set<std::string>> rules_;
};

// Any authenticated caller may call anything: for the status and reflection services of a server
// that must not answer anonymous peers.
class RequireAuthenticatedAuthorizer final : public Authorizer {
 public:
  Status Authorize(const CallerIdentity& caller, const std::string& service,
                   const std::string& method) const override;
};

}  // namespace rrpc::rpc
