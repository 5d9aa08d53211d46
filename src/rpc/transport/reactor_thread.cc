#include "rpc/transport/reactor_thread.h"

#include <utility>
#include <vector>

namespace rrpc::rpc {
namespace {

thread_local struct ev_loop* tls_loop = nullptr;
thread_local std::vector<std::function<void()>> tls_at_stop;

}  // namespace

struct ev_loop* ReactorLoopOfThisThread() {
  return tls_loop;
}

void AtReactorStop(std::function<void()> fn) { tls_at_stop.push_back(std::move(fn)); }

void EnterReactorThread(struct ev_loop* loop) { tls_loop = loop; }

void LeaveReactorThread() {
  std::vector<std::function<void()>> at_stop;
  at_stop.swap(tls_at_stop);
  for (std::function<void()>& fn : at_stop) fn();
  tls_loop = nullptr;
}

}  // namespace rrpc::rpc
