#include "rrpc/rpc/rpc_controller.h"

#include <cstdint>

#include "rpc/core/outbound_call.h"
#include "util/spin_wait.h"

namespace rrpc::rpc {

RpcController::RpcController() = default;
RpcController::~RpcController() = default;

void RpcController::set_deadline(MonoTime deadline) {
  deadline_ = deadline;
  timeout_ = deadline.IsMax() ? MonoDelta::Max() : deadline - MonoTime::Now();
}

int RpcController::AddOutboundSidecar(BlockSlice sidecar) {
  outbound_sidecars_.push_back(std::move(sidecar));
  return static_cast<int>(outbound_sidecars_.size()) - 1;
}

int RpcController::AddOutboundSidecar(Slice borrowed) {
  return AddOutboundSidecar(BlockSlice{BlockRef(), borrowed});
}

bool RpcController::IsRetriable() const {
  // The connection failed (reset, or declared dead): the call may go to another server. Whether
  // the first one ran it is unknown: only idempotent or exactly-once calls should be moved.
  if (status_.IsNetworkError()) return true;
  if (!error_) return false;
  return error_->code() == ErrorStatusPB::ERROR_SERVER_TOO_BUSY ||
         error_->code() == ErrorStatusPB::ERROR_UNAVAILABLE;
}

namespace {
// call_ while a Cancel() takes its reference: never a call's address.
OutboundCall* const kCancelling = reinterpret_cast<OutboundCall*>(uintptr_t{1});
}  // namespace

void RpcController::Cancel() {
  cancel_requested_.store(true, std::memory_order_seq_cst);
  OutboundCall* call = call_.load(std::memory_order_seq_cst);
  while (true) {
    if (call == nullptr) return;  // none attached yet (it will see the flag), or finished
    if (call == kCancelling) {    // another Cancel(), for the few instructions of its AddRef
      CpuRelax();
      call = call_.load(std::memory_order_seq_cst);
      continue;
    }
    if (call_.compare_exchange_weak(call, kCancelling, std::memory_order_seq_cst,
                                    std::memory_order_seq_cst)) {
      break;
    }
  }
  // Alive while call_ is kCancelling: its DetachCall (before it finishes) waits for the swap back.
  scoped_refptr<OutboundCall> keep(call);
  call_.store(call, std::memory_order_release);
  keep->Cancel();
}

void RpcController::DetachCallSlow(OutboundCall* call, OutboundCall* seen) {
  OutboundCall* expected = seen;
  do {
    if (expected != kCancelling && expected != call) return;  // not attached (failed to attach)
    CpuRelax();  // a Cancel() is taking its reference: it puts the call back at once
    expected = call;
  } while (!call_.compare_exchange_weak(expected, nullptr, std::memory_order_acq_rel,
                                        std::memory_order_acquire));
}

const char* HandlerRanName(HandlerRan ran) {
  switch (ran) {
    case HandlerRan::kNo:
      return "did not run";
    case HandlerRan::kMaybe:
      return "may have run";
    case HandlerRan::kYes:
      return "ran";
  }
  return "?";
}

void RpcController::Reset() {
  cancel_requested_.store(false, std::memory_order_relaxed);
  timeout_ = MonoDelta::Max();
  deadline_ = MonoTime::Max();
  outbound_sidecars_.clear();
  status_ = Status::OK();
  error_.reset();
  response_block_.reset();
  inbound_sidecars_.clear();
  retry_policy_ = RetryPolicy();
  attempts_ = 0;
  finished_ = false;
  has_hash_key_ = false;
  has_retry_policy_ = false;
  handler_ran_ = HandlerRan::kNo;
  server_tracks_results_ = false;
  request_left_ = false;
  has_compression_ = false;
  compression_ = Compression::kNone;
  priority_ = 0;
  hash_key_code_ = 0;
  hedge_after_ = MonoDelta();
  request_seq_no_ = 0;
  if (trace_.span_id != 0) trace_ = TraceContext();  // the rare controller that had one
}

void RpcController::set_hash_key(const std::string& key) {
  // FNV-1a, then a 64-bit finalizer (splitmix64) so that near keys land far apart on the ring.
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ULL;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  hash_key_code_ = h;
  has_hash_key_ = true;
}

void RpcController::PrepareRetry() {
  finished_ = false;
  status_ = Status::OK();
  error_.reset();
  response_block_.reset();
  inbound_sidecars_.clear();
  set_deadline(deadline_);  // the attempt gets what is left of the caller's budget
}

}  // namespace rrpc::rpc
