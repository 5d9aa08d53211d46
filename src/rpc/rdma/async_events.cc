#include "rpc/rdma/async_events.h"

#include <glog/logging.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <unordered_map>

#include "rrpc/util/monotime.h"
#include "util/thread.h"

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

void AsyncEventRouter::Deliver(const Context* ctx, const AsyncEvent& event) {
  std::lock_guard<std::mutex> lock(registry_mu);
  if (event.type == AsyncEventType::kDeviceFatal) {
    MarkFailed(ctx);
    // Every QP of the device is gone, and no completion will say so.
    for (auto& [key, target] : Registry()) {
      if (target->ctx == ctx) Flag(target, /*device=*/true);
    }
    return;
  }
  if (event.type != AsyncEventType::kQpFatal || event.context == nullptr) return;
  auto it = Registry().find(event.context);
  if (it != Registry().end() && it->second->ctx == ctx) Flag(it->second, /*device=*/false);
}

void AsyncEventRouter::Drain(Context* ctx) {
  AsyncEvent event;
  while (ctx->NextAsyncEvent(&event)) Deliver(ctx, event);
}

Result<std::unique_ptr<DeviceEventWatcher>> DeviceEventWatcher::Start(Context* ctx,
                                                                      Handler handler) {
  const int stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd < 0) return Status::FromErrno("RDMA async event watcher: eventfd", errno);
  std::unique_ptr<DeviceEventWatcher> w(new DeviceEventWatcher(ctx, std::move(handler), stop_fd));
  Result<std::thread> t = StartThread("rdma", "rdma-events", [raw = w.get()] { raw->Run(); });
  if (!t.ok()) {
    close(stop_fd);
    return t.status();
  }
  w->thread_ = std::move(t).value();
  return w;
}

DeviceEventWatcher::~DeviceEventWatcher() {
  uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(stop_fd_);
}

void DeviceEventWatcher::Run() {
  pollfd fds[2] = {{ctx_->async_fd(), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  bool poll_failed = false;
  for (;;) {
    // Before the wait too: events queued before the watcher started. Not once the fd failed.
    AsyncEvent event;
    while (fds[0].fd >= 0 && ctx_->NextAsyncEvent(&event)) handler_(event);
    fds[0].revents = fds[1].revents = 0;
    if (poll(fds, 2, -1) < 0) {
      // EINTR; otherwise (ENOMEM) try again shortly, saying so once.
      if (errno != EINTR) {
        if (!poll_failed) PLOG(WARNING) << "RDMA " << ctx_->device_name() << ": poll of events";
        poll_failed = true;
        SleepFor(MonoDelta::FromMilliseconds(100));
      }
      continue;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      // The device's event fd failed (the device went away): it would poll ready for ever.
      // Watched no more; the device is treated as dead, so it is let go and opened again.
      LOG(WARNING) << "RDMA " << ctx_->device_name() << ": its async event fd failed (revents "
                   << fds[0].revents << "); the device is treated as failed";
      fds[0].fd = -1;
      event = AsyncEvent();
      event.type = AsyncEventType::kDeviceFatal;
      handler_(event);
    }
  }
}

}  // namespace rrpc::rdma
