#include "rpc/discovery/list_resolver.h"

#include <utility>
#include <vector>

#include "rpc/discovery/resolver_util.h"

namespace rrpc::rpc {
namespace {

class ListResolver : public Resolver {
 public:
  ListResolver(std::string target, std::vector<std::string> entries)
      : target_(std::move(target)), entries_(std::move(entries)) {}

  // Resolves the host names here (getaddrinfo), so a name that does not resolve is an error
  // update, not a construction failure.
  Status Start(ResolverListener listener) override {
    Result<std::vector<Sockaddr>> addrs = ResolveHostPorts(entries_);
    if (!addrs.ok()) {
      listener(Result<std::vector<Sockaddr>>(addrs.status().CloneAndPrepend(target_)));
    } else {
      listener(addrs);
    }
    return Status::OK();
  }
  void Stop() override {}
  const std::string& target() const override { return target_; }

 private:
  const std::string target_;
  const std::vector<std::string> entries_;
};

}  // namespace

Result<std::unique_ptr<Resolver>> NewListResolver(const std::string& target,
                                                  const std::string& list) {
  std::vector<std::string> entries;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    const std::string entry = list.substr(pos, comma - pos);
    if (!entry.empty()) {
      std::string host;
      uint16_t port = 0;
      Status s = SplitHostPort(entry, &host, &port);
      if (!s.ok()) {
        return Status::InvalidArgument("list target entry: " + s.message(), target);
      }
      entries.push_back(entry);
    }
    pos = comma + 1;
  }
  if (entries.empty()) return Status::InvalidArgument("list target names no server", target);
  return std::unique_ptr<Resolver>(new ListResolver(target, std::move(entries)));
}

}  // namespace rrpc::rpc
