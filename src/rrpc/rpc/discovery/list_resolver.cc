#include "rrpc/rpc/discovery/list_resolver.h"

#include <utility>
#include <vector>

namespace rrpc::rpc {
namespace {

class ListResolver : public Resolver {
 public:
  ListResolver(std::string target, std::vector<Sockaddr> addrs)
      : target_(std::move(target)), addrs_(std::move(addrs)) {}

  Status Start(ResolverListener listener) override {
    listener(Result<std::vector<Sockaddr>>(addrs_));
    return Status::OK();
  }
  void Stop() override {}
  const std::string& target() const override { return target_; }

 private:
  const std::string target_;
  const std::vector<Sockaddr> addrs_;
};

}  // namespace

Result<std::unique_ptr<Resolver>> NewListResolver(const std::string& target,
                                                  const std::string& list) {
  std::vector<Sockaddr> addrs;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    const std::string entry = list.substr(pos, comma - pos);
    if (!entry.empty()) {
      Result<Sockaddr> addr = Sockaddr::Parse(entry);
      if (!addr.ok()) {
        return Status::InvalidArgument("list target entry '" + entry + "' is not host:port",
                                       target);
      }
      addrs.push_back(*addr);
    }
    pos = comma + 1;
  }
  if (addrs.empty()) return Status::InvalidArgument("list target names no server", target);
  return std::unique_ptr<Resolver>(new ListResolver(target, std::move(addrs)));
}

}  // namespace rrpc::rpc
