#include "bench/peers/raw_tcp_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <thread>
#include <unordered_map>

#include "bench/peers/payload_pattern.h"
#include "bench/peers/raw_tcp_wire.h"

namespace rrpc {
namespace bench {
namespace {

// Stop reading from a connection while this much output waits for the peer to read it.
constexpr size_t kMaxQueuedOutput = 64u << 20;
// Smallest read: big enough to take a whole pipelined batch of small frames in one call.
constexpr size_t kReadChunk = 64u << 10;

struct Connection {
  int fd = -1;
  uint32_t events = 0;  // the interest set registered with epoll
  size_t need = 0;      // bytes a partially read frame still needs
  ByteBuffer in;
  ByteBuffer out;
};

std::string ErrnoString(const char* what) { return std::string(what) + ": " + strerror(errno); }

}  // namespace

// One server thread: an epoll set with one listener and the connections accepted on it.
class RawTcpEchoLoop {
 public:
  RawTcpEchoLoop(int listen_fd, long response_bytes, bool corrupt)
      : listen_fd_(listen_fd), response_bytes_(response_bytes), corrupt_(corrupt) {}

  ~RawTcpEchoLoop() {
    for (auto& entry : conns_) close(entry.first->fd);
    if (wake_fd_ >= 0) close(wake_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    close(listen_fd_);
  }

  bool Init(std::string* error) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0) {
      *error = ErrnoString("epoll/eventfd");
      return false;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the listener
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) {
      *error = ErrnoString("epoll_ctl(listener)");
      return false;
    }
    ev.data.ptr = this;  // the stop signal
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
      *error = ErrnoString("epoll_ctl(eventfd)");
      return false;
    }
    return true;
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  void Stop() {
    if (!thread_.joinable()) return;  // never started: Start() failed part way
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0) perror("raw-tcp server: eventfd write");
    thread_.join();
  }

 private:
  void Run() {
    epoll_event events[256];
    while (true) {
      const int n = epoll_wait(epoll_fd_, events, 256, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        Fail("raw-tcp server: epoll_wait: %s", strerror(errno));
      }
      for (int i = 0; i < n; ++i) {
        void* tag = events[i].data.ptr;
        if (tag == this) return;
        if (tag == nullptr) {
          AcceptAll();
        } else {
          OnEvents(static_cast<Connection*>(tag), events[i].events);
        }
      }
    }
  }

  void AcceptAll() {
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN) perror("raw-tcp server: accept4");
        return;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto conn = std::make_unique<Connection>();
      conn->fd = fd;
      conn->events = EPOLLIN;
      epoll_event ev{};
      ev.events = conn->events;
      ev.data.ptr = conn.get();
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        perror("raw-tcp server: epoll_ctl(conn)");
        close(fd);
        continue;
      }
      Connection* raw = conn.get();
      conns_.emplace(raw, std::move(conn));
    }
  }

  void OnEvents(Connection* c, uint32_t events) {
    bool ok = (events & EPOLLERR) == 0;
    if (ok && (events & (EPOLLIN | EPOLLHUP))) ok = ReadAndAnswer(c);
    if (ok && (events & EPOLLOUT)) ok = Flush(c);
    if (!ok) {
      CloseConnection(c);
      return;
    }
    UpdateInterest(c);
  }

  // Reads what the kernel has and answers every complete frame. False: the connection is done.
  bool ReadAndAnswer(Connection* c) {
    while (true) {
      char* dst = c->in.EnsureWritable(std::max(kReadChunk, c->need));
      const size_t room = c->in.writable();
      const ssize_t n = read(c->fd, dst, room);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN;
      }
      c->in.Commit(n);
      if (!AnswerFrames(c)) return false;
      if (!Flush(c)) return false;
      // A full buffer means the kernel may hold more; otherwise wait for the next event.
      if (static_cast<size_t>(n) < room || c->out.readable() >= kMaxQueuedOutput) return true;
    }
  }

  bool AnswerFrames(Connection* c) {
    const char* p = c->in.data();
    const size_t avail = c->in.readable();
    const bool verbatim = response_bytes_ < 0 && !corrupt_;
    size_t done = 0;
    c->need = 0;
    while (avail - done >= kFrameHeaderBytes) {
      const uint32_t len = DecodeFrameLength(p + done);
      if (len > kMaxFramePayload) {
        fprintf(stderr, "raw-tcp server: frame of %u bytes exceeds the limit; closing\n", len);
        return false;
      }
      if (avail - done < kFrameHeaderBytes + len) {
        c->need = kFrameHeaderBytes + len - (avail - done);
        break;
      }
      if (!verbatim) {
        const size_t resp_len = response_bytes_ < 0 ? len : static_cast<size_t>(response_bytes_);
        char* out = c->out.EnsureWritable(kFrameHeaderBytes + resp_len);
        EncodeFrameLength(static_cast<uint32_t>(resp_len), out);
        PayloadPattern::BuildResponse(p + done + kFrameHeaderBytes, len, out + kFrameHeaderBytes,
                                      resp_len);
        if (corrupt_ && resp_len > 0) out[kFrameHeaderBytes + resp_len - 1] ^= 1;
        c->out.Commit(kFrameHeaderBytes + resp_len);
      }
      done += kFrameHeaderBytes + len;
    }
    if (verbatim && done > 0) {
      // An echo of complete frames is the frames themselves: send them straight from the read
      // buffer and copy only what the kernel did not take.
      size_t sent = 0;
      if (c->out.readable() == 0) {
        const ssize_t n = send(c->fd, p, done, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
        if (n > 0) sent = n;
      }
      if (sent < done) c->out.Append(p + sent, done - sent);
    }
    c->in.Consume(done);
    return true;
  }

  bool Flush(Connection* c) {
    while (c->out.readable() > 0) {
      const ssize_t n = send(c->fd, c->out.data(), c->out.readable(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN;
      }
      c->out.Consume(n);
    }
    return true;
  }

  void UpdateInterest(Connection* c) {
    uint32_t want = 0;
    if (c->out.readable() < kMaxQueuedOutput) want |= EPOLLIN;
    if (c->out.readable() > 0) want |= EPOLLOUT;
    if (want == c->events) return;
    c->events = want;
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = c;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
      perror("raw-tcp server: epoll_ctl(mod)");
      CloseConnection(c);
    }
  }

  void CloseConnection(Connection* c) {
    close(c->fd);  // also leaves the epoll set
    conns_.erase(c);
  }

  const int listen_fd_;  // owned
  const long response_bytes_;
  const bool corrupt_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::unordered_map<Connection*, std::unique_ptr<Connection>> conns_;
};

std::unique_ptr<PeerServer> RawTcpEchoServer::Start(const PeerConfig& config, std::string* error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, config.bind_host.c_str(), &addr.sin_addr) != 1) {
    *error = "bind host must be an IPv4 address: " + config.bind_host;
    return nullptr;
  }
  std::unique_ptr<RawTcpEchoServer> server(new RawTcpEchoServer());
  int port = config.port;
  for (int i = 0; i < config.server_threads; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = ErrnoString("socket");
      return nullptr;
    }
    // The loop owns the listener from here on, so every error path below closes it.
    server->loops_.push_back(std::make_unique<RawTcpEchoLoop>(fd, config.server_response_bytes,
                                                              config.corrupt_responses_for_test));
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
      *error = ErrnoString("SO_REUSEPORT");
      return nullptr;
    }
    // The first listener picks the port (maybe ephemeral); the others share it.
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      *error = ErrnoString("bind") + " (" + config.bind_host + ":" + std::to_string(port) + ")";
      return nullptr;
    }
    if (i == 0) {
      sockaddr_in bound{};
      socklen_t len = sizeof(bound);
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      port = ntohs(bound.sin_port);
    }
    if (listen(fd, 4096) != 0) {
      *error = ErrnoString("listen");
      return nullptr;
    }
    if (!server->loops_.back()->Init(error)) return nullptr;
  }
  server->port_ = port;
  for (auto& loop : server->loops_) loop->Start();
  return server;
}

RawTcpEchoServer::~RawTcpEchoServer() { Shutdown(); }

void RawTcpEchoServer::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& loop : loops_) loop->Stop();
}

}  // namespace bench
}  // namespace rrpc
