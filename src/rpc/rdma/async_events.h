// A device's async events (docs/rdma.md, "Async events"). A device has one async event fd,
// which one DeviceEventWatcher per opened device reads (brpc: one watcher per device), whether
// or not any connection uses the device. AsyncEventRouter hands what concerns private-RQ
// connections to them: a QP's fatal or access error to the connection whose endpoint is the
// QP's context pointer (QpInitAttr::context), a device fatal to every connection of that device.
// The connection's reactor is woken (ev_async) and fails the connection there. A device fatal
// also marks the device failed for its owner. (SRQ mode's events go to the reactors' contexts:
// SrqContext::DeliverAsyncEvent; port events to the factory, rdma_factory.cc.)
// Thread-safe: Register/Unregister from the connection's reactor, Deliver from any thread.
#pragma once

#include <ev.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "rpc/rdma/verbs.h"

namespace rrpc::rdma {

class AsyncEventRouter {
 public:
  // What a connection registers; owned by it, registered from Start to Close.
  struct Target {
    const Context* ctx = nullptr;  // the device whose events concern it
    struct ev_loop* loop = nullptr;
    ev_async* wake = nullptr;  // sent (from any thread) when a flag below is set
    std::mutex mu;
    bool qp_failed = false;      // guarded by mu
    bool device_failed = false;  // guarded by mu
  };
  // `key`: the QP's context pointer. No event is handed to `target` once Unregister returns.
  static void Register(const void* key, Target* target);
  static void Unregister(const void* key);
  // Hands `event`, read from `ctx`, to the connection it concerns (if any).
  static void Deliver(const Context* ctx, const AsyncEvent& event);
  // Reads every event waiting on `ctx` and delivers each (tests; a device's watcher reads).
  static void Drain(Context* ctx);
  // The owner of a device (the factory) learns of its death here: `failed` is set when a device
  // fatal event of `ctx` is read, by a private-RQ connection (Drain) or an SRQ context
  // (DeviceFailed). Watched while the owner holds the device.
  static void WatchDevice(const Context* ctx, std::shared_ptr<std::atomic<bool>> failed);
  static void UnwatchDevice(const Context* ctx);
  static void DeviceFailed(const Context* ctx);
};

// The one reader of a device's async event fd: a thread, from Start until destroyed, that
// hands each event (Context::NextAsyncEvent, which re-reads the port on a port event) to
// `handler`, on that thread. Events are read while the device is idle too. When the fd itself
// fails (error or hang-up: the device went away) the handler gets one kDeviceFatal, said once in
// the log, and the fd is watched no more (it would poll ready for ever).
class DeviceEventWatcher {
 public:
  using Handler = std::function<void(const AsyncEvent&)>;
  // `ctx` outlives the watcher.
  static Result<std::unique_ptr<DeviceEventWatcher>> Start(Context* ctx, Handler handler);
  ~DeviceEventWatcher();  // stops and joins the thread: no call of the handler after it returns

 private:
  DeviceEventWatcher(Context* ctx, Handler handler, int stop_fd)
      : ctx_(ctx), handler_(std::move(handler)), stop_fd_(stop_fd) {}
  void Run();

  Context* const ctx_;
  const Handler handler_;
  const int stop_fd_;  // an eventfd: readable once the watcher is to stop
  std::thread thread_;
};

}  // namespace rrpc::rdma
