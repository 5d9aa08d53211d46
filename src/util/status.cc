#include "rrpc/util/status.h"

#include <cstring>

namespace rrpc {

Status::Status(Code code, std::string_view msg, std::string_view detail, int posix)
    : state_(std::make_unique<State>()) {
  DCHECK(code != Code::kOk);
  state_->code = code;
  state_->posix = posix;
  state_->msg.reserve(msg.size() + detail.size() + 3);
  state_->msg.append(msg);
  if (!detail.empty()) {
    state_->msg.append(" (");
    state_->msg.append(detail);
    state_->msg.append(")");
  }
}

Status Status::FromErrno(std::string_view what, int err, std::string_view detail) {
  std::string msg(what);
  msg.append(": ");
  msg.append(strerror(err));
  Code code = Code::kNetworkError;
  if (err == ENOENT) code = Code::kNotFound;
  if (err == EIO || err == ENOSPC || err == EACCES) code = Code::kIOError;
  if (err == EINVAL) code = Code::kInvalidArgument;
  if (err == ETIMEDOUT) code = Code::kTimedOut;
  return Status(code, msg, detail, err);
}

std::string Status::message() const { return state_ ? state_->msg : std::string(); }

const char* Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "Not found";
    case Code::kCorruption:
      return "Corruption";
    case Code::kNotSupported:
      return "Not supported";
    case Code::kInvalidArgument:
      return "Invalid argument";
    case Code::kIOError:
      return "IO error";
    case Code::kAlreadyPresent:
      return "Already present";
    case Code::kRuntimeError:
      return "Runtime error";
    case Code::kNetworkError:
      return "Network error";
    case Code::kIllegalState:
      return "Illegal state";
    case Code::kAborted:
      return "Aborted";
    case Code::kRemoteError:
      return "Remote error";
    case Code::kServiceUnavailable:
      return "Service unavailable";
    case Code::kTimedOut:
      return "Timed out";
    case Code::kEndOfFile:
      return "End of file";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out = CodeName(state_->code);
  out.append(": ");
  out.append(state_->msg);
  return out;
}

Status Status::CloneAndPrepend(std::string_view prefix) const {
  if (ok()) return Status();
  std::string msg(prefix);
  msg.append(": ");
  msg.append(state_->msg);
  return Status(state_->code, msg, {}, state_->posix);
}

}  // namespace rrpc
