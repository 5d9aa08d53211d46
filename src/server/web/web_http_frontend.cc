#include "server/web/web_http_frontend.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "glog/logging.h"
#include "rrpc/util/monotime.h"
#include "server/web/web_client_tls.h"
#include "util/metrics/counter.h"
#include "util/metrics/gauge.h"
#include "util/metrics/metric_registry.h"

namespace rrpc {
namespace {

constexpr char k503[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 44\r\n"
    "Connection: close\r\n\r\ntoo many connections to the web UI, retry\r\n\r\n";
constexpr char k408[] =
    "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\nContent-Length: 17\r\n"
    "Connection: close\r\n\r\nrequest too slow\n";
constexpr char k502[] =
    "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 24\r\n"
    "Connection: close\r\n\r\nweb UI backend is down\r\n";

constexpr size_t kReadChunk = 16 * 1024;
constexpr size_t kRelayBuffer = 64 * 1024;  // per direction; reading pauses above it
constexpr int kMaxAcceptsPerRound = 64;

int64_t NowMs() { return MonoTime::Now().ToNanoseconds() / 1000000; }

std::string PeerName(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// Case-insensitive search for "\r\n<name>:" in the header block; the value's text or "".
std::string HeaderValue(const std::string& head, const char* name) {
  std::string lower(head.size(), '\0');
  std::transform(head.begin(), head.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const std::string key = std::string("\r\n") + name + ":";
  size_t at = lower.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  const size_t end = lower.find("\r\n", at);
  std::string v = lower.substr(at, end - at);
  v.erase(0, v.find_first_not_of(" \t"));
  v.erase(v.find_last_not_of(" \t") + 1);
  return v;
}

// Empties the socket's receive buffer (so a close sends FIN, not RST, and the client reads our
// answer), then closes it.
void DrainAndClose(int fd) {
  char buf[4096];
  for (int i = 0; i < 16 && ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; ++i) {
  }
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

}  // namespace

// One client connection, and its backend connection once the request is complete.
struct WebHttpFrontend::Conn {
  // HTTPS starts in kHandshaking; kHandshaking and kReading are "still sending its request".
  enum class Phase { kHandshaking, kReading, kConnecting, kRelaying };
  bool still_sending_request() const {
    return phase == Phase::kHandshaking || phase == Phase::kReading;
  }
  // HTTPS: OpenSSL holds client bytes already read from the socket, which poll() will not
  // report, and the connection would read them now.
  bool tls_bytes_waiting() const {
    const bool reads = phase == Phase::kReading ||
                       (phase == Phase::kRelaying && !client_eof && up.size() < kRelayBuffer);
    return tls != nullptr && reads && tls->HasPending();
  }
  int client = -1;
  std::unique_ptr<WebClientTls> tls;  // HTTPS only; destroyed before `client` is closed
  int backend = -1;
  uint16_t backend_port = 0;  // our local port toward civetweb (clients_by_port_ key)
  std::string client_addr;
  Phase phase = Phase::kReading;
  std::string up;    // client -> backend, not yet written
  std::string down;  // backend -> client, not yet written
  bool client_eof = false;
  bool backend_eof = false;
  bool backend_shut = false;  // we passed the client's EOF on
  int64_t deadline_ms = 0;    // reading: the request timeout; relaying: the idle timeout
};

WebHttpFrontend::WebHttpFrontend(Options options) : options_(std::move(options)) {
  if (options_.metric_registry != nullptr) {
    auto entity = options_.metric_registry->FindOrCreateEntity("server", "web");
    refused_metric_ = entity->FindOrCreateCounter(&METRIC_web_connections_refused_total);
    timed_out_metric_ = entity->FindOrCreateCounter(&METRIC_web_request_timeouts_total);
    open_metric_ = entity->FindOrCreateGauge(&METRIC_web_connections_open);
  }
}

WebHttpFrontend::~WebHttpFrontend() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status WebHttpFrontend::Bind(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("web server bind host is not an IPv4 address", host);
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Status::IOError("socket", strerror(errno));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    Status s = Status::NetworkError("could not listen on " + host + ":" + std::to_string(port),
                                    strerror(errno));
    ::close(listen_fd_);
    listen_fd_ = -1;
    return s;
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  bound_port_ = ntohs(addr.sin_port);
  return Status::OK();
}

Status WebHttpFrontend::Start(uint16_t backend_port) {
  CHECK(listen_fd_ >= 0) << "Bind() first";
  backend_port_ = backend_port;
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Status::IOError("eventfd", strerror(errno));
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void WebHttpFrontend::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  thread_.join();
}

bool WebHttpFrontend::LookupClient(uint16_t backend_local_port, std::string* client) const {
  MutexLock l(mu_);
  auto it = clients_by_port_.find(backend_local_port);
  if (it == clients_by_port_.end()) return false;
  *client = it->second;
  return true;
}

WebHttpFrontend::Stats WebHttpFrontend::stats() const {
  return Stats{open_.load(), refused_.load(), timed_out_.load()};
}

void WebHttpFrontend::Loop() {
  std::vector<pollfd> fds;
  std::vector<Conn*> owners;  // fds[i] belongs to owners[i] (nullptr: listener or waker)
  while (!stopping_) {
    fds.clear();
    owners.clear();
    const int64_t now = NowMs();
    int64_t next_deadline = now + 1000;
    fds.push_back({wake_fd_, POLLIN, 0});
    owners.push_back(nullptr);
    if (now >= accept_paused_until_ms_) {
      fds.push_back({listen_fd_, POLLIN, 0});
      owners.push_back(nullptr);
    } else {
      next_deadline = std::min(next_deadline, accept_paused_until_ms_);
    }
    for (const auto& c : conns_) {
      next_deadline = std::min(next_deadline, c->deadline_ms);
      short ce = 0, be = 0;
      switch (c->phase) {
        case Conn::Phase::kHandshaking:
          ce = c->tls->wanted_events() != 0 ? c->tls->wanted_events() : POLLIN;
          break;
        case Conn::Phase::kReading:
          ce = POLLIN;
          break;
        case Conn::Phase::kConnecting:
          be = POLLOUT;
          break;
        case Conn::Phase::kRelaying:
          if (!c->client_eof && c->up.size() < kRelayBuffer) ce |= POLLIN;
          if (!c->down.empty()) ce |= POLLOUT;
          if (!c->backend_eof && c->down.size() < kRelayBuffer) be |= POLLIN;
          if (!c->up.empty()) be |= POLLOUT;
          break;
      }
      if (c->tls != nullptr && c->phase != Conn::Phase::kHandshaking) {
        // A TLS read or write that would block may wait for the other direction.
        ce |= c->tls->wanted_events();
      }
      if (c->tls_bytes_waiting()) next_deadline = now;  // read them without waiting
      // Each connection has one entry per socket, even with no events (errors still show).
      fds.push_back({c->client, ce, 0});
      owners.push_back(c.get());
      if (c->backend >= 0) {
        fds.push_back({c->backend, be, 0});
        owners.push_back(c.get());
      }
    }
    const int timeout = static_cast<int>(std::max<int64_t>(0, next_deadline - now));
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      PLOG(ERROR) << "web UI frontend: poll";
      continue;
    }
    // Connections first (new ones are not in `fds`), then new connections.
    size_t i = 1;
    bool accept_ready = false;
    if (fds.size() > 1 && owners[1] == nullptr) {
      accept_ready = (fds[1].revents & POLLIN) != 0;
      i = 2;
    }
    std::vector<Conn*> done;
    while (i < fds.size()) {
      Conn* c = owners[i];
      short client_events = fds[i].revents;
      short backend_events = 0;
      const bool has_backend = i + 1 < fds.size() && owners[i + 1] == c;
      if (has_backend) backend_events = fds[i + 1].revents;
      i += has_backend ? 2 : 1;
      if (c->tls_bytes_waiting()) client_events |= POLLIN;
      if (c->phase == Conn::Phase::kHandshaking) {
        if (client_events != 0) ContinueHandshake(c);
      } else if (c->phase == Conn::Phase::kReading) {
        if (client_events != 0) ReadRequest(c);
      } else if (c->phase == Conn::Phase::kConnecting) {
        if (backend_events != 0) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(c->backend, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            LOG(WARNING) << "web UI frontend: connect to civetweb: " << strerror(err);
            Refuse(c, k502);
          } else {
            c->phase = Conn::Phase::kRelaying;
          }
        }
      } else if (!Relay(c, client_events, backend_events)) {
        Close(c);
      }
    }
    // Deadlines, and connections closed above (client == -1).
    const int64_t after = NowMs();
    for (auto it = conns_.begin(); it != conns_.end();) {
      Conn* c = it->get();
      if (c->client >= 0 && after >= c->deadline_ms) {
        if (c->still_sending_request()) {
          timed_out_++;
          if (timed_out_metric_ != nullptr) timed_out_metric_->Increment();
          Refuse(c, k408);
        } else {
          Close(c);  // relayed, but no byte either way for io_timeout_ms
        }
      }
      if (c->client < 0) {
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    open_ = static_cast<int64_t>(conns_.size());
    if (open_metric_ != nullptr) open_metric_->Set(open_);
    if (accept_ready) AcceptNew();
  }
  for (auto& c : conns_) Close(c.get());
  conns_.clear();
  open_ = 0;
  if (open_metric_ != nullptr) open_metric_->Set(0);
  ::close(listen_fd_);
  listen_fd_ = -1;
}

void WebHttpFrontend::AcceptNew() {
  for (int n = 0; n < kMaxAcceptsPerRound; ++n) {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The backlog waits; connections we hold free descriptors as they finish or time out.
        accept_paused_until_ms_ = NowMs() + 100;
      }
      return;
    }
    if (conns_.size() >= options_.max_connections) {
      auto oldest_reading = std::find_if(conns_.begin(), conns_.end(),
                                         [](const auto& c) { return c->still_sending_request(); });
      refused_++;
      if (refused_metric_ != nullptr) refused_metric_->Increment();
      if (oldest_reading == conns_.end()) {
        // Every open connection is being served: the newcomer waits its turn elsewhere. (An
        // HTTPS one gets no 503: it has not made a TLS session to read one in.)
        if (options_.tls == nullptr) {
          ssize_t ignored = ::send(fd, k503, sizeof(k503) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          (void)ignored;
        }
        DrainAndClose(fd);
        continue;
      }
      Refuse(oldest_reading->get(), k503);
      conns_.erase(oldest_reading);
    }
    auto c = std::make_unique<Conn>();
    c->client = fd;
    c->client_addr = PeerName(peer);
    c->deadline_ms = NowMs() + options_.request_timeout_ms;
    if (options_.tls != nullptr) {
      Result<std::unique_ptr<WebClientTls>> tls = WebClientTls::Accept(*options_.tls, fd);
      if (!tls.ok()) {
        LOG(WARNING) << "web UI frontend: " << tls.status().ToString();
        Close(c.get());
        continue;
      }
      c->tls = std::move(*tls);
      c->phase = Conn::Phase::kHandshaking;
    }
    conns_.push_back(std::move(c));
  }
}

bool WebHttpFrontend::RequestReadyToRelay(const std::string& buffer) const {
  // Not an HTTP method (a TLS ClientHello, binary junk): civetweb's 400 at once.
  if (!buffer.empty() && (buffer[0] < 'A' || buffer[0] > 'Z')) return true;
  const size_t head_end = buffer.find("\r\n\r\n");
  if (head_end == std::string::npos) return buffer.size() > options_.max_header_bytes;
  const std::string head = buffer.substr(0, head_end + 2);
  if (!HeaderValue(head, "transfer-encoding").empty()) return true;  // civetweb answers 411
  const std::string length = HeaderValue(head, "content-length");
  if (length.empty()) return true;
  char* end = nullptr;
  const unsigned long long body = strtoull(length.c_str(), &end, 10);
  if (end == length.c_str() || *end != '\0' || body > options_.max_body_bytes) return true;
  return buffer.size() - (head_end + 4) >= body;
}

void WebHttpFrontend::ContinueHandshake(Conn* c) {
  switch (c->tls->Handshake()) {
    case WebClientTls::Step::kDone:
      c->phase = Conn::Phase::kReading;
      // The request may have come with the handshake's last flight: the loop reads it next
      // round (HasPending), or when the socket says so.
      break;
    case WebClientTls::Step::kWouldBlock:
      break;
    case WebClientTls::Step::kFailed:
      Close(c);
      break;
  }
}

ssize_t WebHttpFrontend::ClientRecv(Conn* c, char* buf, size_t len) {
  if (c->tls != nullptr) return c->tls->Read(buf, len);
  return ::recv(c->client, buf, len, 0);
}

ssize_t WebHttpFrontend::ClientSend(Conn* c, const char* data, size_t len) {
  if (c->tls != nullptr) return c->tls->Write(data, len);
  return ::send(c->client, data, len, MSG_NOSIGNAL);
}

void WebHttpFrontend::ReadRequest(Conn* c) {
  char buf[kReadChunk];
  const ssize_t n = ClientRecv(c, buf, sizeof(buf));
  if (n < 0) {
    // Nothing yet (HTTPS: a record not complete), or reset before its request was complete.
    if (errno != EAGAIN && errno != EINTR) Close(c);
    return;
  }
  if (n == 0) {
    // The client ended its side with a request still incomplete: civetweb answers what it
    // got (a 400), as it would have without us. Nothing at all: nothing to answer.
    c->client_eof = true;
    if (c->up.empty()) {
      Close(c);
    } else {
      StartRelay(c);
    }
    return;
  }
  c->up.append(buf, static_cast<size_t>(n));
  if (RequestReadyToRelay(c->up)) StartRelay(c);
}

void WebHttpFrontend::StartRelay(Conn* c) {
  c->backend = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c->backend < 0) {
    Refuse(c, k503);
    return;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(backend_port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = ::connect(c->backend, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (rc != 0 && errno != EINPROGRESS) {
    Refuse(c, k502);
    return;
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  getsockname(c->backend, reinterpret_cast<sockaddr*>(&local), &len);
  c->backend_port = ntohs(local.sin_port);
  {
    MutexLock l(mu_);
    clients_by_port_[c->backend_port] = c->client_addr;
  }
  c->phase = rc == 0 ? Conn::Phase::kRelaying : Conn::Phase::kConnecting;
  c->deadline_ms = NowMs() + options_.io_timeout_ms;
}

bool WebHttpFrontend::Relay(Conn* c, short client_events, short backend_events) {
  // A reset client (or one gone both ways) can't take an answer.
  if ((client_events & POLLERR) || ((client_events & POLLHUP) && c->client_eof)) return false;
  bool progress = false;
  char buf[kReadChunk];
  // Reads first, then writes what they brought.
  if ((client_events & (POLLIN | POLLHUP)) && !c->client_eof) {
    const ssize_t n = ClientRecv(c, buf, sizeof(buf));
    if (n > 0) {
      c->up.append(buf, static_cast<size_t>(n));
      progress = c->backend >= 0;  // bytes for nobody don't keep the connection alive
    } else if (n == 0) {
      c->client_eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      return false;
    }
  }
  if (c->backend >= 0 && (backend_events & (POLLIN | POLLHUP | POLLERR))) {
    const ssize_t n = ::recv(c->backend, buf, sizeof(buf), 0);
    if (n > 0) {
      c->down.append(buf, static_cast<size_t>(n));
      progress = true;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      c->backend_eof = true;
      CloseBackend(c);  // civetweb closes after each response; what is left is in `down`
    }
  }
  if (c->backend >= 0 && !c->up.empty()) {
    const ssize_t n = ::send(c->backend, c->up.data(), c->up.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c->up.erase(0, static_cast<size_t>(n));
      progress = true;
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      c->up.clear();  // civetweb closed its side; what it answered still comes down
    }
  }
  if (c->backend >= 0 && c->client_eof && c->up.empty() && !c->backend_shut) {
    ::shutdown(c->backend, SHUT_WR);
    c->backend_shut = true;
  }
  if (c->backend < 0) c->up.clear();  // nobody left to read it
  if (!c->down.empty()) {
    const ssize_t n = ClientSend(c, c->down.data(), c->down.size());
    if (n > 0) {
      c->down.erase(0, static_cast<size_t>(n));
      progress = true;
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return false;  // the client is gone
    }
  }
  if (progress) c->deadline_ms = NowMs() + options_.io_timeout_ms;
  // Done once civetweb has closed and all it sent is passed on.
  return !(c->backend_eof && c->down.empty());
}

void WebHttpFrontend::Refuse(Conn* c, const char* response) {
  // Best effort: one try, the socket may be full. Mid-handshake there is no session to answer in.
  if (c->tls == nullptr) {
    ssize_t ignored = ::send(c->client, response, strlen(response), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  } else if (c->tls->established()) {
    ssize_t ignored = c->tls->Write(response, strlen(response));
    (void)ignored;
  }
  Close(c);
}

void WebHttpFrontend::CloseBackend(Conn* c) {
  if (c->backend < 0) return;
  {
    MutexLock l(mu_);
    clients_by_port_.erase(c->backend_port);
  }
  ::close(c->backend);
  c->backend = -1;
}

void WebHttpFrontend::Close(Conn* c) {
  CloseBackend(c);
  if (c->tls != nullptr) {
    c->tls->Shutdown();  // close_notify: the answer is complete, not cut
    c->tls.reset();
  }
  if (c->client >= 0) {
    DrainAndClose(c->client);
    c->client = -1;
  }
}

}  // namespace rrpc
