// The reactor's accepting side: its SO_REUSEPORT listener, accepting and refusing connections,
// backing off when the process runs out of descriptors or memory. Reactor thread unless noted
// (reactor.h).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "rpc/core/connection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/reactor.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/messenger.h"
#include "util/countdown_latch.h"

namespace rrpc::rpc {

namespace {
// Accepts per readable event on the listener before serving other events.
constexpr int kMaxAcceptsPerEvent = 64;
// Pause of the listener after accept() fails for lack of resources, doubled while it keeps failing.
constexpr MonoDelta kFirstAcceptBackoff = MonoDelta::FromMilliseconds(20);
constexpr MonoDelta kMaxAcceptBackoff = MonoDelta::FromSeconds(1);
}  // namespace

void Reactor::StartAccepting(Socket listener) {
  auto watching = std::make_shared<CountDownLatch>(1);
  auto sock = std::make_shared<Socket>(std::move(listener));
  RunOnReactor([this, sock, watching] {
    listener_ = std::move(*sock);
    ev_io_init(&accept_watcher_, &Reactor::OnAccept, listener_.fd(), EV_READ);
    accept_watcher_.data = this;
    ev_io_start(loop_, &accept_watcher_);
    watching->CountDown();
  });
  watching->Wait();
}

void Reactor::StopAccepting() {
  CHECK(!IsCurrentThread()) << "a reactor cannot wait for itself";
  auto closed = std::make_shared<CountDownLatch>(1);
  RunOnReactor([this, closed] {
    if (listener_.valid()) {
      StopAcceptWatchers();
      listener_.Close();
    }
    closed->CountDown();
  });
  // A reactor already shut down never runs the task (nor accepts); don't wait for it then.
  while (!closed->WaitFor(MonoDelta::FromMilliseconds(100))) {
    if (stopped_.load()) return;
  }
}

void Reactor::OnAccept(struct ev_loop*, ev_io* w, int) {
  static_cast<Reactor*>(w->data)->AcceptConnections();
}

void Reactor::AcceptConnections() {
  DCHECK(IsCurrentThread());
  for (int i = 0; i < kMaxAcceptsPerEvent; i++) {
    Socket sock;
    Sockaddr peer;
    Status s = listener_.Accept(&sock, &peer);
    if (!s.ok()) {
      const int err = s.posix_code();
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == ECONNABORTED || err == EINTR) continue;  // that one is gone; the next may wait
      int64_t dropped = 0;
      if (accept_error_log_.Allow(&dropped)) {
        LOG(WARNING) << messenger_name() << " reactor " << index_ << ": " << s.ToString()
                     << ": refusing new connections for a while" << LogThrottle::Suffix(dropped);
      }
      if (err == EMFILE || err == ENFILE) {
        if (metrics_ != nullptr) metrics_->accept_fd_exhausted->Increment();
        ShedBacklogWithoutDescriptors();
      }
      BackOffAccepting();  // out of descriptors or memory (ENOBUFS, ENOMEM): retrying now fails
      return;
    }
    accept_backoff_ = MonoDelta();
    if (!MessengerInternals::TryAddServerConnection(messenger_)) {
      RefuseConnection(std::move(sock));
      continue;
    }
    PlaceAccepted(FewestConnections(), std::move(sock), peer);
  }
}

Reactor* Reactor::FewestConnections() {
  Reactor* fewest = this;
  int least = server_connections();
  for (int i = 0; i < options_.num_reactors; i++) {
    Reactor* r = MessengerInternals::reactor(*messenger_, i);
    const int owned = r->server_connections();
    if (owned < least && !r->stopped_.load(std::memory_order_relaxed)) {
      fewest = r;
      least = owned;
    }
  }
  return fewest;
}

// An accepted socket on its way to another reactor (its owner). Dropped unserved (the owner
// stopped before its task ran), it closes the socket and takes back what the placement counted.
struct Reactor::HandedOver {
  HandedOver(Reactor* owner, Socket sock, const Sockaddr& peer)
      : owner(owner), sock(std::move(sock)), peer(peer) {}
  HandedOver(const HandedOver&) = delete;
  HandedOver& operator=(const HandedOver&) = delete;
  ~HandedOver() {
    if (!sock.valid()) return;
    owner->server_connections_.fetch_sub(1, std::memory_order_relaxed);
    MessengerInternals::RemoveServerConnection(owner->messenger_);
  }

  Reactor* const owner;
  Socket sock;
  const Sockaddr peer;
};

void Reactor::PlaceAccepted(Reactor* owner, Socket sock, const Sockaddr& peer) {
  owner->server_connections_.fetch_add(1, std::memory_order_relaxed);
  if (owner == this) {
    ServeAccepted(std::move(sock), peer);
    return;
  }
  if (metrics_ != nullptr) metrics_->connections_handed_over->Increment();
  auto handed = std::make_shared<HandedOver>(owner, std::move(sock), peer);
  owner->RunOnReactor([handed] {
    // A reactor shutting down runs its queued tasks after closing its connections: this one
    // would be served by nobody, so it is closed (and uncounted) with `handed`.
    if (handed->owner->stopped_.load(std::memory_order_relaxed)) return;
    handed->owner->ServeAccepted(std::move(handed->sock), handed->peer);
  });
}

void Reactor::ServeAccepted(Socket sock, const Sockaddr& peer) {
  DCHECK(IsCurrentThread());
  scoped_refptr<Connection> conn(
      new Connection(this, Connection::Direction::kServer,
                     transport_factory_->NewServerTransport(std::move(sock)), peer));
  Connection* raw = conn.get();
  connections_.emplace(raw, std::move(conn));
  raw->Start();
}

void Reactor::ShedBacklogWithoutDescriptors() {
  if (reserved_fd_ < 0) return;
  ::close(reserved_fd_);
  // Each refused socket is closed at once, so the freed descriptor serves every accept here.
  for (int i = 0; i < kMaxAcceptsPerEvent; i++) {
    Socket sock;
    Sockaddr peer;
    if (!listener_.Accept(&sock, &peer).ok()) break;
    RefuseConnection(std::move(sock));
  }
  // Another thread may have taken the descriptor meanwhile: then there is no reserve until a
  // later shed finds one free (reopened on the next failure).
  reserved_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void Reactor::RefuseConnection(Socket sock) {
  if (metrics_ != nullptr) metrics_->connections_refused->Increment();
  // Best effort and never blocking: a fresh socket's send buffer holds the few bytes.
  ssize_t ignored =
      ::send(sock.fd(), refusal_frame_.data(), refusal_frame_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)ignored;
  sock.Close();
}

void Reactor::BackOffAccepting() {
  accept_backoff_ = accept_backoff_ == MonoDelta()
                        ? kFirstAcceptBackoff
                        : std::min(kMaxAcceptBackoff, accept_backoff_ + accept_backoff_);
  ev_io_stop(loop_, &accept_watcher_);
  ev_timer_stop(loop_, &accept_backoff_timer_);
  ev_timer_set(&accept_backoff_timer_, accept_backoff_.ToSeconds(), 0.0);
  ev_timer_start(loop_, &accept_backoff_timer_);
}

void Reactor::OnAcceptBackoffDone(struct ev_loop*, ev_timer* w, int) {
  auto* reactor = static_cast<Reactor*>(w->data);
  if (!reactor->listener_.valid()) return;
  ev_io_start(reactor->loop_, &reactor->accept_watcher_);
}

void Reactor::StopAcceptWatchers() {
  ev_io_stop(loop_, &accept_watcher_);
  ev_timer_stop(loop_, &accept_backoff_timer_);
}

}  // namespace rrpc::rpc
