#include "rpc/discovery/file_resolver.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "rpc/discovery/resolver_util.h"
#include "util/thread.h"

namespace rrpc::rpc {
namespace {

// A servers file larger than this is refused rather than read into memory.
constexpr size_t kMaxFileBytes = 4 << 20;
// While the directory cannot be watched (it does not exist yet), how often to try again.
constexpr MonoDelta kRewatchInterval = MonoDelta::FromSeconds(1);

constexpr uint32_t kWatchEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                  IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;

Result<std::string> ReadSmallFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open", errno, path);
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Status::FromErrno("read", err, path);
    }
    if (n == 0) break;
    if (out.size() + n > kMaxFileBytes) {
      close(fd);
      return Status::InvalidArgument("servers file larger than 4 MiB", path);
    }
    out.append(buf, n);
  }
  close(fd);
  return out;
}

class FileResolver : public Resolver {
 public:
  FileResolver(std::string target, std::string path)
      : target_(std::move(target)), path_(std::move(path)) {
    const size_t slash = path_.rfind('/');
    dir_ = slash == 0 ? "/" : path_.substr(0, slash);
    name_ = path_.substr(slash + 1);
  }
  ~FileResolver() override { Stop(); }

  Status Start(ResolverListener listener) override {
    if (thread_.joinable()) return Status::IllegalState("resolver already started", target_);
    listener_ = std::move(listener);
    inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) return Status::FromErrno("inotify_init1", errno, target_);
    TryWatch();
    Reload();
    RRPC_ASSIGN_OR_RETURN(thread_, StartThread("resolver", "file-resolver", [this] { Run(); }));
    return Status::OK();
  }

  void Stop() override {
    if (thread_.joinable()) {
      wake_.Notify();
      thread_.join();
    }
    if (inotify_fd_ >= 0) close(inotify_fd_);
    inotify_fd_ = -1;
  }

  const std::string& target() const override { return target_; }

 private:
  void TryWatch() {
    watch_ = inotify_add_watch(inotify_fd_, dir_.c_str(), kWatchEvents);
    if (watch_ < 0) {
      LOG(WARNING) << target_ << ": cannot watch " << dir_ << " (" << strerror(errno)
                   << "), trying again every " << kRewatchInterval.ToString();
    }
  }

  // Reads, parses and resolves the file; pushes the set when it changed (or follows an error),
  // an error update when it cannot be used.
  void Reload() {
    Result<std::vector<Sockaddr>> addrs = [&]() -> Result<std::vector<Sockaddr>> {
      RRPC_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path_));
      RRPC_ASSIGN_OR_RETURN(std::vector<std::string> entries, ParseHostPortLines(text, path_));
      RRPC_ASSIGN_OR_RETURN(std::vector<Sockaddr> resolved, ResolveHostPorts(entries));
      return Normalized(std::move(resolved));
    }();
    if (!addrs.ok()) {
      LOG(WARNING) << target_ << ": keeping the last servers: " << addrs.status().ToString();
      last_.reset();
      listener_(Result<std::vector<Sockaddr>>(addrs.status().CloneAndPrepend(target_)));
      return;
    }
    if (last_ && *last_ == *addrs) return;
    last_ = *addrs;
    listener_(addrs);
  }

  void Run() {
    for (;;) {
      pollfd fds[2] = {{wake_.fd(), POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
      const int timeout_ms = watch_ < 0 ? static_cast<int>(kRewatchInterval.ToMilliseconds()) : -1;
      const int rc = poll(fds, 2, timeout_ms);
      if (rc < 0 && errno == EINTR) continue;
      if (fds[0].revents != 0) return;
      if (watch_ < 0) {
        TryWatch();
        if (watch_ >= 0) Reload();
        continue;
      }
      if (fds[1].revents == 0) continue;
      bool changed = false;
      alignas(inotify_event) char buf[4096];
      for (;;) {
        const ssize_t n = read(inotify_fd_, buf, sizeof(buf));
        if (n <= 0) break;
        for (ssize_t off = 0; off < n;) {
          const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
          off += sizeof(inotify_event) + ev->len;
          if (ev->wd != watch_) continue;  // a watch removed earlier
          if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
            // The directory itself went away: watch again once it is back.
            inotify_rm_watch(inotify_fd_, watch_);
            watch_ = -1;
            changed = true;
          } else if (ev->len > 0 && name_ == ev->name) {
            changed = true;
          }
        }
      }
      if (changed) Reload();
    }
  }

  const std::string target_;
  const std::string path_;
  std::string dir_;
  std::string name_;
  ResolverListener listener_;
  WakeFd wake_;
  int inotify_fd_ = -1;
  int watch_ = -1;  // the directory's watch; -1 while it cannot be watched
  // The last set pushed; empty after an error, so the next good read is pushed even if equal.
  std::optional<std::vector<Sockaddr>> last_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Resolver>> NewFileResolver(const std::string& target,
                                                  const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Status::InvalidArgument("file target needs an absolute path (file:///dir/file)", target);
  }
  if (path.back() == '/') return Status::InvalidArgument("file target names a directory", target);
  return std::unique_ptr<Resolver>(new FileResolver(target, path));
}

}  // namespace rrpc::rpc
