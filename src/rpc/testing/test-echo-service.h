// The echo service the RPC tests and the connection fuzz targets serve (rtest.proto). No gtest
// here, so a fuzz target can use it too. Handlers run on worker threads; thread-safe.
#pragma once

#include <atomic>
#include <cstring>
#include <functional>
#include <utility>

#include "rpc/testing/rtest.rrpc.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

// Echoes data back (and its sidecars); sleeps or fails on request. Add adds.
class TestEchoService : public rtest::EchoServiceIf {
 public:
  // A fuzz target ignores sleep_ms: a fuzzed one would park the workers for hours.
  enum class Sleeps { kHonored, kIgnored };
  explicit TestEchoService(Sleeps sleeps = Sleeps::kHonored) : sleeps_(sleeps) {}

  // Runs first in every Echo handler, on its worker thread: tests block there (HandlerGate),
  // record the order calls run in, or add response sidecars. Settable at any time.
  using EchoHook = std::function<void(const rtest::EchoRequestPB& req, RpcContext* context)>;
  void set_echo_hook(EchoHook hook) {
    MutexLock l(hook_mu_);
    hook_ = std::move(hook);
  }
  // true: the response carries the request's sidecars themselves (slices of the blocks they
  // arrived in: zero copy on a transport that can send from them); false (default): copies.
  void set_echo_sidecars_by_reference(bool on) { echo_by_reference_.store(on); }

  void Echo(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
            RpcContext* context) override {
    calls_.fetch_add(1);
    EchoHook hook;
    {
      MutexLock l(hook_mu_);
      hook = hook_;
    }
    if (hook) hook(*req, context);
    if (sleeps_ == Sleeps::kHonored && req->sleep_ms() > 0)
      SleepFor(MonoDelta::FromMilliseconds(req->sleep_ms()));
    if (req->has_fail_with()) {
      context->RespondFailure(Status::IllegalState(req->fail_with()));
      return;
    }
    resp->set_data(req->data());
    for (size_t i = 0; i < context->num_inbound_sidecars(); i++) {
      if (echo_by_reference_.load()) {
        context->AddOutboundSidecar(context->inbound_sidecar_block(i));
        continue;
      }
      Slice s = context->inbound_sidecar(i);
      BlockRef block = Block::Allocate(s.size());
      memcpy(block->data(), s.data(), s.size());
      context->AddOutboundSidecar(BlockSlice{block, Slice(block->data(), s.size())});
    }
    context->RespondSuccess();
  }
  void Add(const rtest::AddRequestPB* req, rtest::AddResponsePB* resp,
           RpcContext* context) override {
    calls_.fetch_add(1);
    resp->set_sum(req->a() + req->b());
    context->RespondSuccess();
  }
  // Handlers run (Echo and Add), counted as they start.
  int calls() const { return calls_.load(); }

 private:
  const Sleeps sleeps_;
  std::atomic<int> calls_{0};
  std::atomic<bool> echo_by_reference_{false};
  Mutex hook_mu_;
  EchoHook hook_ RRPC_GUARDED_BY(hook_mu_);
};

}  // namespace rrpc::rpc
