#include "rrpc/rpc/discovery/resolver.h"

#include <utility>

#include "rpc/discovery/dns_resolver.h"
#include "rpc/discovery/etcd_resolver.h"
#include "rpc/discovery/file_resolver.h"
#include "rpc/discovery/list_resolver.h"

namespace rrpc::rpc {

Result<std::unique_ptr<Resolver>> NewResolver(const std::string& target) {
  const size_t sep = target.find("://");
  if (sep == std::string::npos) {
    return Status::InvalidArgument(
        "target has no scheme (list://, file://, dns://, dns+srv://, etcd://)", target);
  }
  const std::string scheme = target.substr(0, sep);
  const std::string rest = target.substr(sep + 3);
  if (scheme == "list") return NewListResolver(target, rest);
  if (scheme == "file") return NewFileResolver(target, rest);
  if (scheme == "dns") return NewDnsResolver(target, rest, /*srv=*/false);
  if (scheme == "dns+srv") return NewDnsResolver(target, rest, /*srv=*/true);
  if (scheme == "etcd") return NewEtcdResolver(target, rest);
  return Status::InvalidArgument("unknown target scheme '" + scheme + "'", target);
}

}  // namespace rrpc::rpc
