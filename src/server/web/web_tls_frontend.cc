#include "server/web/web_tls_frontend.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rrpc {

namespace {

// How often blocked loops look at the stop flag.
constexpr int kPollSliceMs = 100;

std::string AddrToString(const sockaddr_in& addr) {
  char ip[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

void SetIoTimeouts(int fd, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool SendAll(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool SslWriteAll(SSL* ssl, const char* data, size_t len) {
  while (len > 0) {
    int n = SSL_write(ssl, data, static_cast<int>(len));
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

WebTlsFrontend::WebTlsFrontend(Options options) : options_(std::move(options)) {}

WebTlsFrontend::~WebTlsFrontend() {
  Stop();
  if (listen_fd_ >= 0) close(listen_fd_);
}

Status WebTlsFrontend::ReloadCertificates() {
  if (tls_ == nullptr) return Status::IllegalState("web TLS not bound");
  return tls_->Reload();
}

Status WebTlsFrontend::Bind(const std::string& host, uint16_t port) {
  CHECK(tls_ == nullptr) << "Bind called twice";
  security::TlsContextOptions tls;
  tls.certificate_file = options_.certificate_path;
  tls.private_key_file = options_.private_key_path;
  tls.ca_certificate_file = options_.ca_certificate_path;
  tls.request_client_certificate = tls.require_client_certificate =
      !options_.ca_certificate_path.empty();
  RRPC_ASSIGN_OR_RETURN(tls_, security::TlsContext::Create(std::move(tls)));

  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::FromErrno("socket", errno);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("bad IPv4 address", host);
  }
  std::string where = host + ":" + std::to_string(port);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno("bind", errno, where);
  }
  if (listen(listen_fd_, 128) != 0) return Status::FromErrno("listen", errno, where);
  socklen_t len = sizeof(addr);
  if (getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::FromErrno("getsockname", errno, where);
  }
  bound_port_ = ntohs(addr.sin_port);
  return Status::OK();
}

void WebTlsFrontend::Start(uint16_t backend_port) {
  CHECK(listen_fd_ >= 0) << "Start before a successful Bind";
  backend_port_ = backend_port;
  stopping_ = false;
  acceptor_ = std::thread([this] { AcceptLoop(); });
  for (int i = 0; i < options_.num_threads; ++i) {
    relays_.emplace_back([this] { RelayLoop(); });
  }
}

void WebTlsFrontend::Stop() {
  if (!acceptor_.joinable()) return;
  {
    MutexLock l(mu_);
    stopping_ = true;
    // Wakes relays blocked in a handshake, read or write at once.
    for (int fd : active_fds_) shutdown(fd, SHUT_RDWR);
  }
  queue_cv_.NotifyAll();
  acceptor_.join();
  for (auto& t : relays_) t.join();
  relays_.clear();
  MutexLock l(mu_);
  for (auto& [fd, unused] : queue_) close(fd);
  queue_.clear();
}

bool WebTlsFrontend::LookupClient(uint16_t backend_local_port, std::string* client) const {
  MutexLock l(mu_);
  auto it = clients_by_port_.find(backend_local_port);
  if (it == clients_by_port_.end()) return false;
  *client = it->second;
  return true;
}

void WebTlsFrontend::AcceptLoop() {
  while (!stopping_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    int rc = poll(&pfd, 1, kPollSliceMs);
    if (rc <= 0) continue;
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // The client gave up, or fds ran out: try again next round.
    bool queued = false;
    {
      MutexLock l(mu_);
      if (!stopping_ && queue_.size() < options_.max_queued_connections) {
        queue_.emplace_back(fd, AddrToString(peer));
        queued = true;
      }
    }
    if (!queued) {
      VLOG(1) << "web TLS frontend busy, dropping connection from " << AddrToString(peer);
      close(fd);
      continue;
    }
    queue_cv_.NotifyOne();
  }
}

void WebTlsFrontend::RelayLoop() {
  for (;;) {
    int fd;
    std::string client;
    {
      MutexLock l(mu_);
      while (!stopping_ && queue_.empty()) queue_cv_.Wait(mu_);
      if (stopping_) return;
      fd = queue_.front().first;
      client = std::move(queue_.front().second);
      queue_.pop_front();
      active_fds_.insert(fd);
    }
    Relay(fd, client);
    {
      MutexLock l(mu_);
      active_fds_.erase(fd);
    }
    close(fd);
  }
}

void WebTlsFrontend::Relay(int client_fd, const std::string& client_addr) {
  SetIoTimeouts(client_fd, options_.io_timeout_ms);
  int one = 1;
  setsockopt(client_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  Result<SSL*> made = tls_->NewServerSsl();
  if (!made.ok()) return;
  SSL* ssl = *made;
  SSL_set_fd(ssl, client_fd);
  if (SSL_accept(ssl) != 1) {
    VLOG(1) << "web TLS handshake with " << client_addr << " failed: " << security::OpenSslErrors();
    SSL_free(ssl);
    return;
  }

  int backend = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(backend_port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  uint16_t local_port = 0;
  bool connected =
      backend >= 0 && connect(backend, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (connected) {
    SetIoTimeouts(backend, options_.io_timeout_ms);
    socklen_t len = sizeof(addr);
    getsockname(backend, reinterpret_cast<sockaddr*>(&addr), &len);
    local_port = ntohs(addr.sin_port);
    MutexLock l(mu_);
    // Registered before any byte goes to civetweb, so its handler always finds the client.
    clients_by_port_[local_port] = client_addr;
    active_fds_.insert(backend);
  } else {
    LOG(WARNING) << "web TLS frontend cannot reach civetweb on port " << backend_port_ << ": "
                 << strerror(errno);
  }

  char buf[16384];
  bool client_open = true;
  int idle_ms = 0;
  while (connected && !stopping_ && idle_ms < options_.io_timeout_ms) {
    pollfd pfds[2] = {{client_fd, static_cast<short>(client_open ? POLLIN : 0), 0},
                      {backend, POLLIN, 0}};
    // Bytes OpenSSL already read (decrypted, or whole records read ahead: the shared TlsContext
    // reads ahead) don't show on the socket.
    bool pending = client_open && SSL_has_pending(ssl) == 1;
    int rc = poll(pfds, 2, pending ? 0 : kPollSliceMs);
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0 && !pending) {
      idle_ms += kPollSliceMs;
      continue;
    }
    idle_ms = 0;
    if (pending || (pfds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      int n = SSL_read(ssl, buf, sizeof(buf));
      if (n > 0) {
        if (!SendAll(backend, buf, static_cast<size_t>(n))) break;
      } else {
        // The client finished sending (or left): let civetweb see the end, keep relaying the
        // response.
        client_open = false;
        shutdown(backend, SHUT_WR);
      }
    }
    if (pfds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = recv(backend, buf, sizeof(buf), 0);
      if (n <= 0) {
        SSL_shutdown(ssl);  // civetweb finished the response: send close_notify.
        break;
      }
      if (!SslWriteAll(ssl, buf, static_cast<size_t>(n))) break;
    }
  }
  if (connected) {
    MutexLock l(mu_);
    clients_by_port_.erase(local_port);
    active_fds_.erase(backend);
  }
  if (backend >= 0) close(backend);
  SSL_free(ssl);
  ERR_clear_error();  // OpenSSL's error queue is per thread; leave it clean for the next one.
}

}  // namespace rrpc
