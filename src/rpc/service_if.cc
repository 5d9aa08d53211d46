#include "rrpc/rpc/service_if.h"

#include <glog/logging.h>

namespace rrpc::rpc {

const RpcMethodInfo* ServiceIf::FindMethod(std::string_view method_name) const {
  auto it = methods_.find(method_name);
  return it == methods_.end() ? nullptr : it->second.get();
}

Status ServiceIf::SetRunInline(std::string_view method_name, bool run_inline) {
  auto it = methods_.find(method_name);
  if (it == methods_.end()) {
    return Status::NotFound("no such method", service_name() + "." + std::string(method_name));
  }
  it->second->run_inline = run_inline;
  return Status::OK();
}

void ServiceIf::AddMethod(RpcMethodInfo info) {
  auto owned = std::make_unique<RpcMethodInfo>(std::move(info));
  std::string_view key = owned->method_name;  // points into the owned struct: stable
  CHECK(methods_.emplace(key, std::move(owned)).second) << "duplicate method " << key;
}

}  // namespace rrpc::rpc
