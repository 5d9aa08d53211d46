#include "bench/peers/raw_tcp_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench/peers/payload_pattern.h"
#include "bench/peers/raw_tcp_wire.h"

namespace rrpc {
namespace bench {
namespace {

// A server that stays silent this long has failed the run, rather than hanging it.
constexpr int kIoTimeoutMs = 10000;
constexpr size_t kReadChunk = 64u << 10;

sockaddr_in ResolveOrFail(const std::string& host_port) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(host_port, &host, &port)) Fail("bad server address '%s'", host_port.c_str());
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) Fail("cannot resolve '%s': %s", host.c_str(), gai_strerror(rc));
  sockaddr_in addr;
  memcpy(&addr, result->ai_addr, sizeof(addr));
  freeaddrinfo(result);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

int ConnectOrFail(const sockaddr_in& addr, bool abortive_close) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Fail("socket: %s", strerror(errno));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail("connect to %s:%d: %s", inet_ntoa(addr.sin_addr), ntohs(addr.sin_port), strerror(errno));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{kIoTimeoutMs / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (abortive_close) {
    // cps mode opens tens of thousands of connections; closing with RST leaves no TIME_WAIT
    // socket behind, so the run measures connection setup, not ephemeral-port exhaustion.
    linger lg{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  }
  return fd;
}

// Reads into `in`, blocking until at least one byte arrives (bounded by SO_RCVTIMEO).
void ReadSomeOrFail(int fd, size_t min_room, ByteBuffer* in) {
  while (true) {
    char* dst = in->EnsureWritable(min_room);
    const ssize_t n = recv(fd, dst, in->writable(), 0);
    if (n > 0) {
      in->Commit(n);
      return;
    }
    if (n == 0) Fail("the server closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN) Fail("no response from the server within %d ms", kIoTimeoutMs);
    Fail("recv: %s", strerror(errno));
  }
}

// Sends as much of `out` as the kernel takes now.
void SendSomeOrFail(int fd, ByteBuffer* out) {
  while (out->readable() > 0) {
    const ssize_t n = send(fd, out->data(), out->readable(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      out->Consume(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    Fail("send: %s", n < 0 ? strerror(errno) : "wrote nothing");
  }
}

void CheckHeaderOrFail(uint64_t seq, uint32_t len, const PayloadPattern& pattern) {
  if (len != pattern.response_bytes()) {
    Fail("response %llu has %u payload bytes, expected %zu", static_cast<unsigned long long>(seq),
         len, pattern.response_bytes());
  }
}

void CheckBodyOrFail(uint64_t seq, const char* body, const PayloadPattern& pattern) {
  if (!pattern.CheckResponse(seq, body, pattern.response_bytes())) {
    Fail("response %llu: content mismatch", static_cast<unsigned long long>(seq));
  }
}

void RunPipelined(const PeerConfig& config, const ClientThreadArgs& args, const sockaddr_in& addr) {
  const MeasureWindow& window = *args.window;
  const PayloadPattern pattern(config.payload_bytes, config.response_bytes);
  const size_t depth = config.Depth();
  const size_t request_frame = kFrameHeaderBytes + pattern.request_bytes();
  const size_t response_frame = kFrameHeaderBytes + pattern.response_bytes();
  const int fd = ConnectOrFail(addr, false);

  ByteBuffer in;
  ByteBuffer out;
  // Send time of request #seq sits at seq % depth: at most `depth` are outstanding and TCP
  // answers them in order.
  std::vector<Clock::time_point> issued(depth);
  uint64_t next_seq = 0;
  uint64_t next_answer = 0;
  auto issue = [&](Clock::time_point now) {
    char* dst = out.EnsureWritable(request_frame);
    EncodeFrameLength(static_cast<uint32_t>(pattern.request_bytes()), dst);
    pattern.FillRequest(next_seq, dst + kFrameHeaderBytes);
    out.Commit(request_frame);
    issued[next_seq % depth] = now;
    ++next_seq;
  };

  Clock::time_point now = Clock::now();
  for (size_t i = 0; i < depth; ++i) issue(now);
  while (next_answer < next_seq) {
    SendSomeOrFail(fd, &out);
    if (out.readable() > 0) {
      // The kernel's send buffer is full: wait for room or for responses (reading them is what
      // lets the server go on reading our requests), never block on one direction only.
      pollfd pfd{fd, POLLIN | POLLOUT, 0};
      const int rc = poll(&pfd, 1, kIoTimeoutMs);
      if (rc == 0) Fail("connection stalled for %d ms", kIoTimeoutMs);
      if (rc < 0 && errno != EINTR) Fail("poll: %s", strerror(errno));
      if (rc < 0 || (pfd.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    }
    ReadSomeOrFail(fd, std::max(kReadChunk, response_frame), &in);
    now = Clock::now();
    while (in.readable() >= kFrameHeaderBytes) {
      CheckHeaderOrFail(next_answer, DecodeFrameLength(in.data()), pattern);
      if (in.readable() < response_frame) break;
      CheckBodyOrFail(next_answer, in.data() + kFrameHeaderBytes, pattern);
      args.stats->Record(issued[next_answer % depth], now, window);
      ++next_answer;
      in.Consume(response_frame);
      if (now < window.end) issue(now);
    }
  }
  close(fd);
}

void RunConnectPerCall(const PeerConfig& config, const ClientThreadArgs& args,
                       const sockaddr_in& addr) {
  const MeasureWindow& window = *args.window;
  const PayloadPattern pattern(config.payload_bytes, config.response_bytes);
  std::vector<char> request(kFrameHeaderBytes + pattern.request_bytes());
  const size_t response_frame = kFrameHeaderBytes + pattern.response_bytes();
  ByteBuffer in;
  for (uint64_t seq = 0;; ++seq) {
    const Clock::time_point start = Clock::now();
    if (start >= window.end) break;
    const int fd = ConnectOrFail(addr, true);
    EncodeFrameLength(static_cast<uint32_t>(pattern.request_bytes()), request.data());
    pattern.FillRequest(seq, request.data() + kFrameHeaderBytes);
    ByteBuffer out;
    out.Append(request.data(), request.size());
    while (out.readable() > 0) {
      SendSomeOrFail(fd, &out);
      if (out.readable() > 0) {
        pollfd pfd{fd, POLLOUT, 0};
        if (poll(&pfd, 1, kIoTimeoutMs) == 0) Fail("connection stalled for %d ms", kIoTimeoutMs);
      }
    }
    while (in.readable() < response_frame) {
      ReadSomeOrFail(fd, response_frame - in.readable(), &in);
      if (in.readable() >= kFrameHeaderBytes) {
        CheckHeaderOrFail(seq, DecodeFrameLength(in.data()), pattern);
      }
    }
    if (in.readable() != response_frame) Fail("server sent more than one response");
    CheckBodyOrFail(seq, in.data() + kFrameHeaderBytes, pattern);
    in.Consume(response_frame);
    close(fd);
    args.stats->Record(start, Clock::now(), window);
  }
}

}  // namespace

void RunRawTcpClientThread(const PeerConfig& config, const ClientThreadArgs& args) {
  const sockaddr_in addr = ResolveOrFail(args.server_addr);
  if (config.mode == BenchMode::kCps) {
    RunConnectPerCall(config, args, addr);
  } else {
    RunPipelined(config, args, addr);
  }
}

}  // namespace bench
}  // namespace rrpc
