// AsyncEventRouter: a device's async events for private-RQ connections (docs/rdma.md, "Async
// events"). A device has one async event fd; every private-RQ connection of it watches that fd
// on its reactor, and whichever reads an event hands it to the connection it concerns: a QP's
// fatal or access error to the connection whose endpoint is the QP's context pointer
// (QpInitAttr::context), a device fatal to every connection of that device. The connection's
// reactor is woken (ev_async) and fails the connection there. Port and GID events are not
// used: a QP that loses its path fails on its own once its retries run out. (SRQ mode reads the
// same fd in its SrqContext.) A device fatal also marks the device failed for its owner.
// Thread-safe: Register/Unregister from the connection's reactor, Drain from any reactor.
#pragma once

#include <ev.h>

#include <atomic>
#include <memory>
#include <mutex>

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
  // Reads every event waiting on `ctx` and hands each to the connection it concerns.
  static void Drain(Context* ctx);
  // The owner of a device (the factory) learns of its death here: `failed` is set when a device
  // fatal event of `ctx` is read, by a private-RQ connection (Drain) or an SRQ context
  // (DeviceFailed). Watched while the owner holds the device.
  static void WatchDevice(const Context* ctx, std::shared_ptr<std::atomic<bool>> failed);
  static void UnwatchDevice(const Context* ctx);
  static void DeviceFailed(const Context* ctx);
};

}  // namespace rrpc::rdma
