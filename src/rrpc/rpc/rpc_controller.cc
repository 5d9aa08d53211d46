#include "rrpc/rpc/rpc_controller.h"

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
  if (!error_) return false;
  return error_->code() == ErrorStatusPB::ERROR_SERVER_TOO_BUSY ||
         error_->code() == ErrorStatusPB::ERROR_UNAVAILABLE;
}

void RpcController::Reset() {
  timeout_ = MonoDelta::Max();
  deadline_ = MonoTime::Max();
  outbound_sidecars_.clear();
  finished_ = false;
  status_ = Status::OK();
  error_.reset();
  response_block_.reset();
  inbound_sidecars_.clear();
  retry_policy_ = RetryPolicy();
  attempts_ = 0;
  request_seq_no_ = 0;
  server_tracks_results_ = false;
  request_left_ = false;
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
