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

Status ServiceIf::SetMethodPool(std::string_view method_name, std::string pool) {
  auto it = methods_.find(method_name);
  if (it == methods_.end()) {
    return Status::NotFound("no such method", service_name() + "." + std::string(method_name));
  }
  it->second->pool = std::move(pool);
  return Status::OK();
}

Status ServiceIf::SetPriority(std::string_view method_name, CallPriority priority) {
  auto it = methods_.find(method_name);
  if (it == methods_.end()) {
    return Status::NotFound("no such method", service_name() + "." + std::string(method_name));
  }
  it->second->priority = priority;
  return Status::OK();
}

Status ServiceIf::SetMaxConcurrency(std::string_view method_name, int max_concurrency) {
  auto it = methods_.find(method_name);
  if (it == methods_.end()) {
    return Status::NotFound("no such method", service_name() + "." + std::string(method_name));
  }
  if (max_concurrency < 0) {
    return Status::InvalidArgument("negative concurrency limit",
                                   service_name() + "." + std::string(method_name));
  }
  it->second->max_concurrency = max_concurrency;
  return Status::OK();
}

void ServiceIf::AddMethod(RpcMethodInfo info) {
  auto owned = std::make_unique<RpcMethodInfo>(std::move(info));
  std::string_view key = owned->method_name;  // points into the owned struct: stable
  CHECK(methods_.emplace(key, std::move(owned)).second) << "duplicate method " << key;
}

}  // namespace rrpc::rpc
