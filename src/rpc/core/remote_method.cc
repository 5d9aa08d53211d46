#include "rpc/core/remote_method.h"

#include "rpc/core/header_codec.h"
#include "rpc/observe/rpc_metrics.h"

namespace rrpc::rpc {

RemoteMethod::RemoteMethod(const Sockaddr& remote, const std::string& service_name,
                           const std::string& method_name, ClientMethodMetrics* metrics)
    : remote_(remote),
      method_name_(method_name),
      encoded_(EncodeRemoteMethod(service_name, method_name)),
      metrics_(metrics) {}

RemoteMethodCache::~RemoteMethodCache() {
  const int n = size_.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++) slots_[i].method->Release();
}

scoped_refptr<RemoteMethod> RemoteMethodCache::GetSlow(MessengerMetrics* metrics,
                                                       const Sockaddr& remote,
                                                       const std::string& service,
                                                       const std::string& method) {
  // Another string object with the same name (a caller passing a temporary): match by name.
  int n = size_.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++) {
    if (SameBytes(slots_[i].method->method_name(), method)) return slots_[i].method;
  }
  MutexLock l(mu_);
  n = size_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (SameBytes(slots_[i].method->method_name(), method)) return slots_[i].method;
  }
  auto* made =
      new RemoteMethod(remote, service, method,
                       metrics != nullptr ? metrics->ClientMethod(service, method) : nullptr);
  scoped_refptr<RemoteMethod> result(made);
  if (n < kSlots) {
    made->AddRef();  // the slot's
    slots_[n].key = &method;
    slots_[n].method = made;
    size_.store(n + 1, std::memory_order_release);
  }
  return result;
}

}  // namespace rrpc::rpc
