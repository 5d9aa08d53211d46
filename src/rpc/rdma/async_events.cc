#include "rpc/rdma/async_events.h"

#include <unordered_map>

namespace rrpc::rdma {
namespace {

std::mutex registry_mu;
std::unordered_map<const void*, AsyncEventRouter::Target*>& Registry() {
  static auto* targets = new std::unordered_map<const void*, AsyncEventRouter::Target*>();
  return *targets;
}

std::unordered_map<const Context*, std::shared_ptr<std::atomic<bool>>>& Watched() {
  static auto* devices =
      new std::unordered_map<const Context*, std::shared_ptr<std::atomic<bool>>>();
  return *devices;
}

void MarkFailed(const Context* ctx) {  // REQUIRES registry_mu held
  auto it = Watched().find(ctx);
  if (it != Watched().end()) it->second->store(true, std::memory_order_release);
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

void AsyncEventRouter::WatchDevice(const Context* ctx, std::shared_ptr<std::atomic<bool>> failed) {
  std::lock_guard<std::mutex> lock(registry_mu);
  Watched()[ctx] = std::move(failed);
}

void AsyncEventRouter::UnwatchDevice(const Context* ctx) {
  std::lock_guard<std::mutex> lock(registry_mu);
  Watched().erase(ctx);
}

void AsyncEventRouter::DeviceFailed(const Context* ctx) {
  std::lock_guard<std::mutex> lock(registry_mu);
  MarkFailed(ctx);
}

void AsyncEventRouter::Drain(Context* ctx) {
  AsyncEvent event;
  while (ctx->NextAsyncEvent(&event)) {
    std::lock_guard<std::mutex> lock(registry_mu);
    if (event.type == AsyncEventType::kDeviceFatal) {
      MarkFailed(ctx);
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
