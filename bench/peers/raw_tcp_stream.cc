#include "bench/peers/raw_tcp_stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "bench/peers/payload_pattern.h"
#include "bench/peers/raw_tcp_wire.h"

namespace rrpc {
namespace bench {
namespace {

// The peer is the one-way limit, so it moves bytes in the largest pieces that help (a sweep on 2
// vCPUs, docs/bench-peers.md): the writer hands the kernel 1 MiB of frames per send() (an rrpc
// stream's default window), and the reader sleeps until 256 KiB are queued (SO_RCVLOWAT), then
// takes up to 1 MiB per recv(). 256 KiB batches woken at every segment moved 2.4x fewer bytes.
constexpr size_t kSendBatch = 1024u << 10;
constexpr size_t kReadChunk = 1024u << 10;
constexpr int kReadLowWater = 256 << 10;
constexpr int kIoTimeoutS = 10;

std::string ErrnoString(const char* what) { return std::string(what) + ": " + strerror(errno); }

bool RecvAll(int fd, char* dst, size_t len) {
  while (len > 0) {
    const ssize_t n = recv(fd, dst, len, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    dst += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::unique_ptr<PeerServer> RawTcpStreamServer::Start(const PeerConfig& config,
                                                      std::string* error) {
  std::unique_ptr<RawTcpStreamServer> server(new RawTcpStreamServer());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = ErrnoString("socket");
    return nullptr;
  }
  server->listen_fd_ = fd;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(config.port));
  if (inet_pton(AF_INET, config.bind_host.c_str(), &addr.sin_addr) != 1) {
    *error = "bad bind address '" + config.bind_host + "'";
    return nullptr;
  }
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 128) != 0) {
    *error = ErrnoString("bind/listen");
    return nullptr;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  server->port_ = ntohs(addr.sin_port);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

RawTcpStreamServer::~RawTcpStreamServer() {
  Shutdown();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void RawTcpStreamServer::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  // Wakes accept() and every writer blocked in send().
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> writers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    writers.swap(writers_);
  }
  for (std::thread& t : writers) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : fds_) close(fd);
  fds_.clear();
}

void RawTcpStreamServer::AcceptLoop() {
  while (!stopping_) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    fds_.push_back(fd);
    writers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void RawTcpStreamServer::Serve(int fd) {
  char open[kFrameHeaderBytes + 4];
  if (!RecvAll(fd, open, sizeof(open)) || DecodeFrameLength(open) != 4) return;
  const uint32_t message = DecodeFrameLength(open + kFrameHeaderBytes);
  if (message > kMaxFramePayload) return;
  const PayloadPattern pattern(message, message);
  const size_t frame = kFrameHeaderBytes + message;
  const size_t frames = std::max<size_t>(1, kSendBatch / frame);
  std::vector<char> batch(frames * frame);
  for (size_t i = 0; i < frames; i++) {
    EncodeFrameLength(message, batch.data() + i * frame);
    pattern.FillRequest(0, batch.data() + i * frame + kFrameHeaderBytes);
  }
  uint64_t seq = 0;
  while (!stopping_) {
    // Only the seq stamps change from batch to batch: the rest stays as filled.
    for (size_t i = 0; i < frames; i++) {
      char* body = batch.data() + i * frame + kFrameHeaderBytes;
      const size_t stamp = std::min<size_t>(8, message);
      for (size_t b = 0; b < stamp; b++) body[b] = static_cast<char>(((seq + i) >> (8 * b)) & 0xff);
    }
    seq += frames;
    const char* p = batch.data();
    size_t left = batch.size();
    while (left > 0) {
      const ssize_t n = send(fd, p, left, MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        return;  // the client closed: the stream is over
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
}

void RunRawTcpStreamClientThread(const PeerConfig& config, const ClientThreadArgs& args) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(args.server_addr, &host, &port)) Fail("bad server address");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    Fail("stream mode needs a numeric IPv4 server address, not '%s'", host.c_str());
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail("connect to %s: %s", args.server_addr.c_str(), strerror(errno));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &kReadLowWater, sizeof(kReadLowWater));
  timeval tv{kIoTimeoutS, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const uint32_t message = static_cast<uint32_t>(config.payload_bytes);
  char open[kFrameHeaderBytes + 4];
  EncodeFrameLength(4, open);
  EncodeFrameLength(message, open + kFrameHeaderBytes);
  if (send(fd, open, sizeof(open), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(open))) {
    Fail("send: %s", strerror(errno));
  }
  const PayloadPattern pattern(message, message);
  const size_t frame = kFrameHeaderBytes + message;
  const MeasureWindow& window = *args.window;
  ByteBuffer in;
  uint64_t seq = 0;
  while (true) {
    char* dst = in.EnsureWritable(std::max(kReadChunk, frame));
    const ssize_t n = recv(fd, dst, in.writable(), 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      Fail("recv: %s", n == 0 ? "the server closed the stream" : strerror(errno));
    }
    in.Commit(static_cast<size_t>(n));
    const Clock::time_point now = Clock::now();
    while (in.readable() >= frame) {
      if (DecodeFrameLength(in.data()) != message) {
        Fail("message %llu has %u bytes, expected %u", static_cast<unsigned long long>(seq),
             DecodeFrameLength(in.data()), message);
      }
      if (!pattern.CheckResponse(seq, in.data() + kFrameHeaderBytes, message)) {
        Fail("message %llu: content mismatch", static_cast<unsigned long long>(seq));
      }
      // One-way: no send time to measure from; counts the message (latency 0).
      args.stats->Record(now, now, window);
      in.Consume(frame);
      seq++;
    }
    if (now >= window.end) break;
  }
  close(fd);
}

}  // namespace bench
}  // namespace rrpc
