#include "rrpc/rpc/rdma/async_events.h"

#include <unordered_map>

namespace rrpc::rdma {
namespace {

std::mutex registry_mu;
std::unordered_map<const void*, AsyncEventRouter::Target*>& Registry() {
  static auto* targets = new std::unordered_map<const void*, AsyncEventRouter::Target*>();
  return *targets;
}

void Flag(AsyncEventRouter::Target* t, bool device) {
  {
    std::lock_guard<std::mutex> lock(t->mu);
    (device ? t->device_failed : t->qp_failed) = true;
  }
  ev_async_send(t->loop, t->wake);
}

}  // namespace

void AsyncEventRouter::Register(const void* key, Target* target) {
  std::lock_guard<std::mutex> lock(registry_mu);
  Registry()[key] = target;
}

void AsyncEventRouter::Unregister(const void* key) {
  std::lock_guard<std::mutex> lock(registry_mu);
  Registry().erase(key);
}

void AsyncEventRouter::Drain(Context* ctx) {
  AsyncEvent event;
  while (ctx->NextAsyncEvent(&event)) {
    std::lock_guard<std::mutex> lock(registry_mu);
    if (event.type == AsyncEventType::kDeviceFatal) {
      // Every QP of the device is gone, and no completion will say so.
      for (auto& [key, target] : Registry()) {
        if (target->ctx == ctx) Flag(target, /*device=*/true);
      }
      continue;
    }
    if (event.type != AsyncEventType::kQpFatal || event.context == nullptr) continue;
    auto it = Registry().find(event.context);
    if (it != Registry().end() && it->second->ctx == ctx) Flag(it->second, /*device=*/false);
  }
}

}  // namespace rrpc::rdma
