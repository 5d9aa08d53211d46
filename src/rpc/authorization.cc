#include "rrpc/rpc/authorization.h"

#include <fstream>
#include <sstream>

#include "rrpc/rpc/security_options.h"

namespace rrpc::rpc {

const char* AuthMethodName(AuthMethod method) {
  switch (method) {
    case AuthMethod::kNone:
      return "none";
    case AuthMethod::kCertificate:
      return "certificate";
    case AuthMethod::kToken:
      return "token";
  }
  return "unknown";
}

const char* SecurityPolicyName(SecurityPolicy policy) {
  switch (policy) {
    case SecurityPolicy::kDisabled:
      return "disabled";
    case SecurityPolicy::kOptional:
      return "optional";
    case SecurityPolicy::kRequired:
      return "required";
  }
  return "unknown";
}

Result<SecurityPolicy> ParseSecurityPolicy(const std::string& text) {
  if (text == "disabled") return SecurityPolicy::kDisabled;
  if (text == "optional") return SecurityPolicy::kOptional;
  if (text == "required") return SecurityPolicy::kRequired;
  return Status::InvalidArgument("security policy must be disabled, optional or required", text);
}

Result<std::unique_ptr<AllowedUsersAuthorizer>> AllowedUsersAuthorizer::FromFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read authorization file", path);
  std::stringstream buf;
  buf << in.rdbuf();
  Result<std::unique_ptr<AllowedUsersAuthorizer>> policy = FromText(buf.str());
  if (!policy.ok()) return policy.status().CloneAndPrepend(path);
  return policy;
}

Result<std::unique_ptr<AllowedUsersAuthorizer>> AllowedUsersAuthorizer::FromText(
    const std::string& text) {
  auto policy = std::make_unique<AllowedUsersAuthorizer>();
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    number++;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string pattern, users, extra;
    if (!(words >> pattern)) continue;  // blank or comment
    if (!(words >> users) || (words >> extra)) {
      return Status::InvalidArgument("line " + std::to_string(number) +
                                     ": expected '<Service.Method> <user>[,<user>...]'");
    }
    std::unordered_set<std::string> allowed;
    std::istringstream list(users);
    std::string user;
    while (std::getline(list, user, ',')) {
      if (!user.empty()) allowed.insert(user);
    }
    policy->Allow(pattern, allowed);
  }
  return policy;
}

void AllowedUsersAuthorizer::Allow(const std::string& pattern,
                                   const std::unordered_set<std::string>& users) {
  rules_[pattern].insert(users.begin(), users.end());
}

Status AllowedUsersAuthorizer::Authorize(const CallerIdentity& caller, const std::string& service,
                                         const std::string& method) const {
  const std::string full = service + "." + method;
  const std::unordered_set<std::string>* allowed = nullptr;
  for (const std::string& key : {full, service + ".*", std::string("*")}) {
    auto it = rules_.find(key);
    if (it != rules_.end()) {
      allowed = &it->second;
      break;
    }
  }
  const std::string who =
      caller.user.empty() ? "unauthenticated caller" : "user '" + caller.user + "'";
  if (allowed == nullptr) return Status::RuntimeError(who + " may not call " + full + " (no rule)");
  if (!caller.user.empty() && (allowed->count(caller.user) != 0 || allowed->count("*") != 0)) {
    return Status::OK();
  }
  return Status::RuntimeError(who + " may not call " + full);
}

Status RequireAuthenticatedAuthorizer::Authorize(const CallerIdentity& caller,
                                                 const std::string& service,
                                                 const std::string& method) const {
  if (!caller.user.empty()) return Status::OK();
  return Status::RuntimeError("unauthenticated callers may not call " + service + "." + method);
}

}  // namespace rrpc::rpc
