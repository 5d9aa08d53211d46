// A minimal HTTP/1.1 client over loopback for the web server's tests: every socket wait is
// bounded (20 s), so a test fails instead of hanging.
#pragma once

#include <arpa/inet.h>
#include <glog/logging.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace rrpc {

// One parsed HTTP/1.1 response.
struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // Lower-case names.
  std::string body;
};

// Parses a whole response as read until the server closed the connection.
inline HttpReply ParseReply(const std::string& raw) {
  HttpReply reply;
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0 && raw.compare(0, 9, "HTTP/1.0 ") != 0) return reply;
  reply.status = std::atoi(raw.c_str() + 9);
  if (head_end == std::string::npos) return reply;
  size_t pos = raw.find("\r\n") + 2;
  while (pos < head_end) {
    size_t eol = raw.find("\r\n", pos);
    std::string line = raw.substr(pos, eol - pos);
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = line.find_first_not_of(' ', colon + 1);
      reply.headers[name] = v == std::string::npos ? "" : line.substr(v);
    }
    pos = eol + 2;
  }
  reply.body = raw.substr(head_end + 4);
  return reply;
}

// Connects to 127.0.0.1:port with a 20 s receive timeout so that no test can hang on a socket.
inline int ConnectLoopback(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_GE(fd, 0);
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  return fd;
}

// Sends `request` as is and returns everything the server sent back before closing. Write
// errors are ignored: the server may answer and close before reading an oversized request.
inline std::string SendRaw(uint16_t port, const std::string& request) {
  int fd = ConnectLoopback(port);
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

inline HttpReply Http(uint16_t port, const std::string& request) {
  return ParseReply(SendRaw(port, request));
}

inline HttpReply Get(uint16_t port, const std::string& target) {
  return Http(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

// The local "ip:port" of a connected socket.
inline std::string LocalAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char ip[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace rrpc
