// Status and Result<T>: how every rrpc function reports failure. No exceptions cross a module
// line. A Status is one pointer wide; OK allocates nothing.
#pragma once

#include <glog/logging.h>

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace rrpc {

class Status {
 public:
  enum class Code : int {
    kOk = 0,
    kNotFound = 1,
    kCorruption = 2,
    kNotSupported = 3,
    kInvalidArgument = 4,
    kIOError = 5,
    kAlreadyPresent = 6,
    kRuntimeError = 7,
    kNetworkError = 8,
    kIllegalState = 9,
    kAborted = 10,
    kRemoteError = 11,
    kServiceUnavailable = 12,
    kTimedOut = 13,
    kEndOfFile = 14,
  };

  Status() = default;  // OK
  Status(const Status& other)
      : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
#define RRPC_STATUS_FACTORY(Name)                                                         \
  static Status Name(std::string_view msg, std::string_view detail = {}, int posix = 0) { \
    return Status(Code::k##Name, msg, detail, posix);                                     \
  }                                                                                       \
  bool Is##Name() const { return code() == Code::k##Name; }
  RRPC_STATUS_FACTORY(NotFound)
  RRPC_STATUS_FACTORY(Corruption)
  RRPC_STATUS_FACTORY(NotSupported)
  RRPC_STATUS_FACTORY(InvalidArgument)
  RRPC_STATUS_FACTORY(IOError)
  RRPC_STATUS_FACTORY(AlreadyPresent)
  RRPC_STATUS_FACTORY(RuntimeError)
  RRPC_STATUS_FACTORY(NetworkError)
  RRPC_STATUS_FACTORY(IllegalState)
  RRPC_STATUS_FACTORY(Aborted)
  RRPC_STATUS_FACTORY(RemoteError)
  RRPC_STATUS_FACTORY(ServiceUnavailable)
  RRPC_STATUS_FACTORY(TimedOut)
  RRPC_STATUS_FACTORY(EndOfFile)
#undef RRPC_STATUS_FACTORY

  // A NetworkError/IOError built from errno, e.g. FromErrno("connect", ECONNREFUSED, "1.2.3.4:5").
  static Status FromErrno(std::string_view what, int err, std::string_view detail = {});

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  // The message alone, without the code name.
  std::string message() const;
  int posix_code() const { return state_ ? state_->posix : 0; }
  // "Network error: connect: Connection refused (1.2.3.4:5)".
  std::string ToString() const;
  static const char* CodeName(Code code);

  // Returns a copy with `prefix: ` put before the message (context added on the way up).
  Status CloneAndPrepend(std::string_view prefix) const;

 private:
  struct State {
    Code code;
    int posix;
    std::string msg;
  };
  Status(Code code, std::string_view msg, std::string_view detail, int posix);
  std::unique_ptr<State> state_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

// A value or the Status that explains why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(runtime/explicit)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(runtime/explicit)
    DCHECK(!status_.ok()) << "Result built from an OK status carries no value";
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    CHECK(ok()) << status_.ToString();
    return *value_;
  }
  const T& value() const& {
    CHECK(ok()) << status_.ToString();
    return *value_;
  }
  T&& value() && {
    CHECK(ok()) << status_.ToString();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace rrpc

// Returns the Status from the enclosing function if `expr` fails.
#define RRPC_RETURN_NOT_OK(expr) \
  do {                           \
    ::rrpc::Status _s = (expr);  \
    if (!_s.ok()) return _s;     \
  } while (0)

#define RRPC_CONCAT_INNER(a, b) a##b
#define RRPC_CONCAT(a, b) RRPC_CONCAT_INNER(a, b)
// RRPC_ASSIGN_OR_RETURN(auto fd, OpenSocket()); returns the Status on failure.
#define RRPC_ASSIGN_OR_RETURN(lhs, rexpr) \
  RRPC_ASSIGN_OR_RETURN_IMPL(RRPC_CONCAT(_result_, __LINE__), lhs, rexpr)
#define RRPC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                               \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#define RRPC_CHECK_OK(expr)          \
  do {                               \
    ::rrpc::Status _s = (expr);      \
    CHECK(_s.ok()) << _s.ToString(); \
  } while (0)
