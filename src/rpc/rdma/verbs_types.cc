// Names of verbs values, for logs and errors.
#include "rpc/rdma/verbs_types.h"

#include <string>

namespace rrpc::rdma {

const char* WcStatusName(WcStatus status) {
  switch (status) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocalLengthError:
      return "local length error";
    case WcStatus::kLocalProtectionError:
      return "local protection error";
    case WcStatus::kFlushed:
      return "flushed";
    case WcStatus::kRnrRetryExceeded:
      return "RNR retry exceeded";
    case WcStatus::kRetryExceeded:
      return "transport retry exceeded";
    case WcStatus::kRemoteInvalidRequest:
      return "remote invalid request";
    case WcStatus::kGeneralError:
      return "general error";
  }
  return "unknown";
}

const char* GidTypeName(GidType type) {
  switch (type) {
    case GidType::kIb:
      return "IB";
    case GidType::kRoceV1:
      return "RoCE v1";
    case GidType::kRoceV2:
      return "RoCE v2";
  }
  return "?";
}

Status CheckServiceLevel(uint8_t sl, bool ethernet) {
  if (sl > 15 || (ethernet && sl > 7)) {
    return Status::InvalidArgument(
        "service level " + std::to_string(sl) + " does not exist on " +
        (ethernet ? "a RoCE port (0..7: the frames' priority)" : "InfiniBand (0..15)"));
  }
  return Status::OK();
}

Status CheckFlowLabel(uint32_t flow_label) {
  if (flow_label > kFlowLabelMask) {
    return Status::InvalidArgument("flow label " + std::to_string(flow_label) +
                                   " does not fit the GRH's 20 bits");
  }
  return Status::OK();
}

Status CheckAckTimeout(uint8_t timeout) {
  if (timeout == 0 || timeout > 31) {
    return Status::InvalidArgument("local ACK timeout " + std::to_string(timeout) +
                                   " is not 1..31 (0 would wait forever on a dead path)");
  }
  return Status::OK();
}

const char* QpStateName(QpState state) {
  switch (state) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kError:
      return "ERR";
  }
  return "?";
}

}  // namespace rrpc::rdma
