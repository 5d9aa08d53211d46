#include "bench/peers/raw_tcp_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bench/peers/payload_pattern.h"
#include "bench/peers/raw_tcp_handoff.h"
#include "bench/peers/raw_tcp_wire.h"

namespace rrpc {
namespace bench {
namespace {

// Stop reading from a connection while this much output waits for the peer to read it.
constexpr size_t kMaxQueuedOutput = 64u << 20;
// Smallest read: big enough to take a whole pipelined batch of small frames in one call.
constexpr size_t kReadChunk = 64u << 10;

std::string ErrnoString(const char* what) { return std::string(what) + ": " + strerror(errno); }

}  // namespace

// One server thread: an epoll set with one listener and the connections accepted on it.
class RawTcpEchoLoop final : public AnswerSink {
 public:
  RawTcpEchoLoop(int listen_fd, long response_bytes, bool corrupt, HandoffPool* workers)
      : listen_fd_(listen_fd),
        response_bytes_(response_bytes),
        corrupt_(corrupt),
        workers_(workers) {}

  ~RawTcpEchoLoop() {
    if (wake_fd_ >= 0) close(wake_fd_);
    if (flush_fd_ >= 0) close(flush_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    close(listen_fd_);
  }

  bool Init(std::string* error) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    flush_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0 || flush_fd_ < 0) {
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
    ev.data.ptr = &flush_fd_;  // workers' flush requests
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, flush_fd_, &ev) != 0) {
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

  // Worker thread: writes the answer to frame `seq` and the early ones it held back, in order.
  void SendFromWorker(const std::shared_ptr<Connection>& c, uint64_t seq,
                      std::unique_ptr<char[]> data, size_t len) override {
    std::lock_guard<std::mutex> l(c->out_mu);
    if (seq != c->answers_sent) {
      c->early_answers.emplace(seq, std::make_pair(std::move(data), len));
      return;
    }
    SendLocked(c, data.get(), len);
    ++c->answers_sent;
    for (auto it = c->early_answers.begin();
         it != c->early_answers.end() && it->first == c->answers_sent;
         it = c->early_answers.erase(it)) {
      SendLocked(c, it->second.first.get(), it->second.second);
      ++c->answers_sent;
    }
  }

 private:
  // Under c->out_mu: writes what the socket takes, queues the rest for this loop to flush.
  void SendLocked(const std::shared_ptr<Connection>& c, const char* data, size_t len) {
    size_t sent = 0;
    if (c->out.readable() == 0) {
      while (sent < len) {
        const ssize_t n = send(c->fd, data + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN) return;  // the loop sees the error and closes the connection
          break;
        }
        sent += n;
      }
    }
    if (sent == len) return;
    c->out.Append(data + sent, len - sent);
    if (c->flush_requested) return;
    c->flush_requested = true;
    {
      std::lock_guard<std::mutex> fl(flush_mu_);
      flush_list_.push_back(c);
    }
    const uint64_t one = 1;
    if (write(flush_fd_, &one, sizeof(one)) < 0) perror("raw-tcp server: eventfd write");
  }

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
        if (tag == &flush_fd_) {
          FlushForWorkers();
        } else if (tag == nullptr) {
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
      auto conn = std::make_shared<Connection>();
      conn->fd = fd;
      conn->events = EPOLLIN;
      epoll_event ev{};
      ev.events = conn->events;
      ev.data.ptr = conn.get();
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        perror("raw-tcp server: epoll_ctl(conn)");
        continue;  // ~Connection closes fd
      }
      Connection* raw = conn.get();
      conns_.emplace(raw, std::move(conn));
    }
  }

  void OnEvents(Connection* c, uint32_t events) {
    bool ok = (events & EPOLLERR) == 0;
    if (ok && (events & (EPOLLIN | EPOLLHUP))) {
      ok = workers_ != nullptr ? ReadToWorkers(c) : ReadAndAnswer(c);
    }
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

  // Without workers `out` is the loop's alone and no lock is taken (the raw limit stays raw).
  std::unique_lock<std::mutex> LockOut(Connection* c) {
    return workers_ != nullptr ? std::unique_lock<std::mutex>(c->out_mu)
                               : std::unique_lock<std::mutex>();
  }

  bool Flush(Connection* c) {
    std::unique_lock<std::mutex> l = LockOut(c);
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
    {
      std::unique_lock<std::mutex> l = LockOut(c);
      if (c->out.readable() < kMaxQueuedOutput) want |= EPOLLIN;
      if (c->out.readable() > 0) want |= EPOLLOUT;
    }
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
    // Workers may still hold it: the descriptor closes with its last owner, the socket now.
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    shutdown(c->fd, SHUT_RDWR);
    conns_.erase(c);
  }

  // --server_workers mode: reads each frame into a buffer of exactly its size (so its bytes are
  // not moved again) together with the next frame's prefix, as rrpc's reader does, and hands every
  // complete frame to a worker. False: the connection is done.
  bool ReadToWorkers(Connection* c) {
    while (true) {
      iovec iov[2];
      int count = 1;
      if (c->frame == nullptr) {
        iov[0] = {c->prefix + c->prefix_got, kFrameHeaderBytes - c->prefix_got};
      } else {
        iov[0] = {c->frame.get() + c->frame_got, c->frame_size - c->frame_got};
        iov[1] = {c->prefix, kFrameHeaderBytes};  // prefix_got is 0 while a frame is read
        count = 2;
      }
      const size_t room = iov[0].iov_len + (count == 2 ? iov[1].iov_len : 0);
      const ssize_t n = readv(c->fd, iov, count);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN;
      }
      size_t left = static_cast<size_t>(n);
      if (c->frame != nullptr) {
        const size_t body = std::min(left, c->frame_size - c->frame_got);
        c->frame_got += body;
        left -= body;
        if (c->frame_got == c->frame_size) HandOff(c);
      }
      c->prefix_got += left;
      if (c->prefix_got == kFrameHeaderBytes) {
        const uint32_t len = DecodeFrameLength(c->prefix);
        if (len > kMaxFramePayload) {
          fprintf(stderr, "raw-tcp server: frame of %u bytes exceeds the limit; closing\n", len);
          return false;
        }
        c->frame_size = kFrameHeaderBytes + len;
        c->frame.reset(new char[c->frame_size]);  // not zeroed: the socket fills it
        memcpy(c->frame.get(), c->prefix, kFrameHeaderBytes);
        c->frame_got = kFrameHeaderBytes;
        c->prefix_got = 0;
        if (len == 0) HandOff(c);
      }
      if (static_cast<size_t>(n) < room) return true;  // drained: wait for the next event
    }
  }

  void HandOff(Connection* c) {
    workers_->Submit({conns_.at(c), this, c->frames_read++, std::move(c->frame), c->frame_size});
    c->frame_size = c->frame_got = 0;
  }

  // Loop thread: writes what workers left in connections' `out`.
  void FlushForWorkers() {
    uint64_t count;
    if (read(flush_fd_, &count, sizeof(count)) < 0 && errno != EAGAIN) {
      perror("raw-tcp server: eventfd read");
    }
    std::vector<std::shared_ptr<Connection>> list;
    {
      std::lock_guard<std::mutex> l(flush_mu_);
      list.swap(flush_list_);
    }
    for (const std::shared_ptr<Connection>& c : list) {
      {
        std::lock_guard<std::mutex> l(c->out_mu);
        c->flush_requested = false;
      }
      if (conns_.count(c.get()) == 0) continue;  // closed meanwhile
      if (Flush(c.get())) {
        UpdateInterest(c.get());
      } else {
        CloseConnection(c.get());
      }
    }
  }

  const int listen_fd_;  // owned
  const long response_bytes_;
  const bool corrupt_;
  HandoffPool* const workers_;  // the server's; nullptr: frames are answered on this thread
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int flush_fd_ = -1;  // workers ask for a flush
  std::thread thread_;
  std::unordered_map<Connection*, std::shared_ptr<Connection>> conns_;
  std::mutex flush_mu_;
  std::vector<std::shared_ptr<Connection>> flush_list_;  // under flush_mu_
};

std::unique_ptr<PeerServer> RawTcpEchoServer::Start(const PeerConfig& config, std::string* error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, config.bind_host.c_str(), &addr.sin_addr) != 1) {
    *error = "bind host must be an IPv4 address: " + config.bind_host;
    return nullptr;
  }
  std::unique_ptr<RawTcpEchoServer> server(new RawTcpEchoServer());
  if (config.server_workers > 0) {
    server->workers_ = std::make_unique<HandoffPool>(
        config.server_workers, config.server_response_bytes, config.corrupt_responses_for_test);
  }
  int port = config.port;
  for (int i = 0; i < config.server_threads; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = ErrnoString("socket");
      return nullptr;
    }
    // The loop owns the listener from here on, so every error path below closes it.
    server->loops_.push_back(std::make_unique<RawTcpEchoLoop>(fd, config.server_response_bytes,
                                                              config.corrupt_responses_for_test,
                                                              server->workers_.get()));
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
  workers_.reset();  // first: a worker may ask a loop for a flush
  for (auto& loop : loops_) loop->Stop();
}

}  // namespace bench
}  // namespace rrpc
