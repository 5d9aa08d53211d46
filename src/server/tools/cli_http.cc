#include "server/tools/cli_http.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace rrpc::server {

namespace {

// Closes the descriptor when the request ends, however it ends.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  const int fd_;
};

}  // namespace

Result<std::string> HttpGet(const Sockaddr& server, const std::string& path, MonoDelta timeout) {
  const std::string peer = server.ToString();
  int fd = socket(server.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("socket", errno, peer);
  FdCloser closer(fd);
  // Blocking I/O bounded by the socket timeouts (Linux applies SO_SNDTIMEO to connect too).
  timeval tv{};
  tv.tv_sec = timeout.ToNanoseconds() / 1000000000;
  tv.tv_usec = (timeout.ToNanoseconds() % 1000000000) / 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, server.addr(), server.addrlen()) != 0) {
    return Status::FromErrno("connect", errno, peer);
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: " + peer + "\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("send", errno, peer);
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("recv", errno, peer);
    if (n == 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  const size_t header_end = reply.find("\r\n\r\n");
  const size_t line_end = reply.find("\r\n");
  if (header_end == std::string::npos || reply.compare(0, 5, "HTTP/") != 0) {
    return Status::NetworkError("not an HTTP response", peer);
  }
  const std::string status_line = reply.substr(0, line_end);
  const size_t code_at = status_line.find(' ');
  if (code_at == std::string::npos || status_line.compare(code_at + 1, 3, "200") != 0) {
    return Status::RemoteError("GET " + path + " answered " + status_line, peer);
  }
  return reply.substr(header_end + 4);
}

}  // namespace rrpc::server
