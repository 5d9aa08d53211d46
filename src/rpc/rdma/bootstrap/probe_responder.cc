#include "rpc/rdma/bootstrap/probe_responder.h"

#include <glog/logging.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "rpc/rdma/bootstrap/path_probe.h"
#include "rrpc/util/monotime.h"
#include "util/thread.h"

namespace rrpc::rdma {

Result<std::unique_ptr<ProbeResponder>> ProbeResponder::Start(Context* ctx) {
  RRPC_ASSIGN_OR_RETURN(std::unique_ptr<CompletionChannel> channel, ctx->CreateChannel());
  const int stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd < 0) return Status::FromErrno("RDMA probe responder: eventfd", errno);
  std::unique_ptr<ProbeResponder> r(new ProbeResponder(std::move(channel), stop_fd));
  Result<std::thread> t = StartThread("rdma", "rdma-probes", [raw = r.get()] { raw->Run(); });
  if (!t.ok()) {
    close(stop_fd);
    return t.status();
  }
  r->thread_ = std::move(t).value();
  return r;
}

ProbeResponder::~ProbeResponder() {
  uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(stop_fd_);
}

void ProbeResponder::Watch(CompletionQueue* cq, PathProbe* probe) {
  MutexLock lock(mu_);
  probes_[cq] = probe;
}

void ProbeResponder::Unwatch(CompletionQueue* cq, const std::function<void()>& destroy) {
  MutexLock lock(mu_);
  probes_.erase(cq);
  destroy();
}

void ProbeResponder::Run() {
  pollfd fds[2] = {{channel_->fd(), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    {
      MutexLock lock(mu_);
      for (;;) {
        Result<CompletionQueue*> cq = channel_->GetEvent();
        if (!cq.ok() || *cq == nullptr) break;
        auto it = probes_.find(*cq);
        if (it != probes_.end()) it->second->Answer();
      }
    }
    fds[0].revents = fds[1].revents = 0;
    if (poll(fds, 2, -1) < 0) {
      if (errno != EINTR) SleepFor(MonoDelta::FromMilliseconds(100));  // ENOMEM: shortly again
      continue;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      // The channel failed (the device went away): it would poll ready for ever. Probes go
      // unanswered from now on, and their clients stay on TCP.
      LOG(WARNING) << "RDMA path probe responder: its completion channel failed (revents "
                   << fds[0].revents << ")";
      fds[0].fd = -1;
    }
  }
}

}  // namespace rrpc::rdma
