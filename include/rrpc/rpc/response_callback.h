// The callback of an asynchronous call (Proxy::AsyncRequest and the generated <Method>Async).
#pragma once

#include <functional>

namespace rrpc::rpc {

// Runs once when an asynchronous call finishes (success, failure or timeout), on a reactor thread:
// it must not block. The outcome is in the call's RpcController.
using ResponseCallback = std::function<void()>;

}  // namespace rrpc::rpc
