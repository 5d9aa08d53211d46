#include "rpc/discovery/etcd_client.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "rpc/discovery/etcd_gateway.pb.h"

namespace rrpc::rpc {
namespace {

namespace gw = rrpc::discovery::etcd;
using google::protobuf::Message;

// An answer (headers, a unary body, one streamed line) larger than this is refused.
constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxBodyBytes = 16 << 20;

std::string ToJson(const Message& msg) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(msg, &out, options);
  return out;
}

Status FromJson(const std::string& json, Message* msg) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto s = google::protobuf::util::JsonStringToMessage(json, msg, options);
  if (!s.ok()) {
    return Status::Corruption("etcd answered JSON we cannot read: " + s.ToString(),
                              json.substr(0, 200));
  }
  return Status::OK();
}

// Waits until `fd` is ready for `events`, `deadline` passes (TimedOut) or `stop` is notified
// (Aborted).
Status WaitFd(int fd, short events, MonoTime deadline, const WakeFd* stop) {
  for (;;) {
    pollfd fds[2] = {{fd, events, 0}, {stop ? stop->fd() : -1, POLLIN, 0}};
    int timeout_ms = -1;
    if (deadline != MonoTime::Max()) {
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>((deadline - MonoTime::Now()).ToMilliseconds(), 0, 1 << 30));
    }
    const int rc = poll(fds, stop ? 2 : 1, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Status::FromErrno("poll", errno);
    if (stop && fds[1].revents != 0) return Status::Aborted("stopping");
    if (fds[0].revents != 0) return Status::OK();
    if (rc == 0) return Status::TimedOut("etcd did not answer in time");
  }
}

// One HTTP/1.1 exchange on one connection: the request, then the response read piece by piece.
class HttpConnection {
 public:
  HttpConnection(const Sockaddr& server, const WakeFd* stop) : server_(server), stop_(stop) {}
  ~HttpConnection() {
    if (fd_ >= 0) close(fd_);
  }

  Status Post(const std::string& path, const std::string& body, MonoTime deadline) {
    fd_ = socket(server_.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return Status::FromErrno("socket", errno);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A watch waits for events for as long as etcd lives: keepalive finds a peer that vanished.
    setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    const int idle = 10, interval = 5, count = 3;
    setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
    if (connect(fd_, server_.addr(), server_.addrlen()) != 0 && errno != EINPROGRESS) {
      return Status::FromErrno("connect to etcd", errno, server_.ToString());
    }
    RRPC_RETURN_NOT_OK(WaitFd(fd_, POLLOUT, deadline, stop_));
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Status::FromErrno("connect to etcd", err, server_.ToString());
    std::string request =
        "POST " + path + " HTTP/1.1\r\nHost: " + server_.ToString() +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += n;
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        RRPC_RETURN_NOT_OK(WaitFd(fd_, POLLOUT, deadline, stop_));
      } else {
        return Status::FromErrno("send to etcd", errno, server_.ToString());
      }
    }
    return Status::OK();
  }

  // Reads the status line and headers.
  Status ReadHead(MonoTime deadline, int* status) {
    size_t end;
    while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
      if (in_.size() > kMaxHeadBytes) return Status::Corruption("etcd sent oversized headers");
      RRPC_RETURN_NOT_OK(ReadMore(deadline));
    }
    const std::string head = in_.substr(0, end);
    in_.erase(0, end + 4);
    if (head.compare(0, 5, "HTTP/") != 0 || head.size() < 12) {
      return Status::Corruption("etcd's answer is not HTTP", head.substr(0, 100));
    }
    *status = atoi(head.c_str() + 9);
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    chunked_ = lower.find("\r\ntransfer-encoding: chunked") != std::string::npos;
    const size_t cl = lower.find("\r\ncontent-length:");
    if (cl != std::string::npos) content_length_ = strtoll(lower.c_str() + cl + 17, nullptr, 10);
    return Status::OK();
  }

  // Passes the body, de-chunked, to `sink` as it arrives, until its end (OK) or a failure.
  Status ReadBody(MonoTime deadline, const std::function<Status(const char*, size_t)>& sink) {
    if (!chunked_) {
      size_t got = 0;
      for (;;) {
        if (!in_.empty()) {
          size_t take = in_.size();
          if (content_length_ >= 0) take = std::min<size_t>(take, content_length_ - got);
          RRPC_RETURN_NOT_OK(sink(in_.data(), take));
          got += take;
          in_.clear();
        }
        if (content_length_ >= 0 && got >= static_cast<size_t>(content_length_)) {
          return Status::OK();
        }
        Status s = ReadMore(deadline);
        if (s.IsEndOfFile() && content_length_ < 0) return Status::OK();
        RRPC_RETURN_NOT_OK(s);
      }
    }
    for (;;) {
      size_t eol;
      while ((eol = in_.find("\r\n")) == std::string::npos) {
        if (in_.size() > 64) return Status::Corruption("etcd sent a bad chunk header");
        RRPC_RETURN_NOT_OK(ReadMore(deadline));
      }
      char* end = nullptr;
      const unsigned long long size = strtoull(in_.c_str(), &end, 16);
      if (end == in_.c_str() || size > kMaxBodyBytes) {
        return Status::Corruption("etcd sent a bad chunk size");
      }
      in_.erase(0, eol + 2);
      if (size == 0) return Status::OK();
      size_t left = size;
      while (left > 0) {
        if (in_.empty()) RRPC_RETURN_NOT_OK(ReadMore(deadline));
        const size_t take = std::min(left, in_.size());
        RRPC_RETURN_NOT_OK(sink(in_.data(), take));
        in_.erase(0, take);
        left -= take;
      }
      while (in_.size() < 2) RRPC_RETURN_NOT_OK(ReadMore(deadline));
      in_.erase(0, 2);  // the chunk's CRLF
    }
  }

 private:
  Status ReadMore(MonoTime deadline) {
    char buf[16384];
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        in_.append(buf, n);
        return Status::OK();
      }
      if (n == 0) return Status::EndOfFile("etcd closed the connection", server_.ToString());
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return Status::FromErrno("recv from etcd", errno, server_.ToString());
      RRPC_RETURN_NOT_OK(WaitFd(fd_, POLLIN, deadline, stop_));
    }
  }

  const Sockaddr server_;
  const WakeFd* const stop_;
  int fd_ = -1;
  std::string in_;  // received, not yet consumed
  bool chunked_ = false;
  int64_t content_length_ = -1;
};

// Whether a failure means "this endpoint is unreachable": try another member.
bool Unreachable(const Status& s) {
  return s.IsNetworkError() || s.IsTimedOut() || s.IsEndOfFile();
}

Status GatewayError(int http_status, const std::string& body) {
  gw::UnaryError err;
  std::string what = "HTTP " + std::to_string(http_status);
  if (FromJson(body, &err).ok() && !err.message().empty()) what += ": " + err.message();
  if (err.code() == 5) return Status::NotFound("etcd: " + what);
  return Status::RemoteError("etcd: " + what);
}

}  // namespace

EtcdClient::EtcdClient(std::vector<Sockaddr> endpoints, MonoDelta timeout, const WakeFd* stop)
    : endpoints_(std::move(endpoints)), timeout_(timeout), stop_(stop) {}

std::string EtcdClient::PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Status EtcdClient::Call(const std::string& path, const std::string& body, std::string* response) {
  Status last;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t e = (current_ + i) % endpoints_.size();
    const MonoTime deadline = MonoTime::Now() + timeout_;
    HttpConnection conn(endpoints_[e], stop_);
    int status = 0;
    response->clear();
    Status s = conn.Post(path, body, deadline);
    if (s.ok()) s = conn.ReadHead(deadline, &status);
    if (s.ok()) {
      s = conn.ReadBody(deadline, [&](const char* data, size_t n) {
        if (response->size() + n > kMaxBodyBytes) {
          return Status::Corruption("etcd's answer is larger than 16 MiB");
        }
        response->append(data, n);
        return Status::OK();
      });
    }
    if (s.ok()) {
      current_ = e;
      return status == 200 ? Status::OK() : GatewayError(status, *response);
    }
    if (!Unreachable(s)) return s;
    last = s;
  }
  return last;
}

Status EtcdClient::RangePrefix(const std::string& prefix, std::vector<KeyValue>* kvs,
                               int64_t* revision) {
  gw::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixRangeEnd(prefix));
  std::string body;
  RRPC_RETURN_NOT_OK(Call("/v3/kv/range", ToJson(req), &body));
  gw::RangeResponse resp;
  RRPC_RETURN_NOT_OK(FromJson(body, &resp));
  kvs->clear();
  for (const gw::KeyValue& kv : resp.kvs()) kvs->push_back({kv.key(), kv.value(), kv.lease()});
  *revision = resp.header().revision();
  return Status::OK();
}

Result<EtcdClient::KeyValue> EtcdClient::Get(const std::string& key) {
  gw::RangeRequest req;
  req.set_key(key);
  std::string body;
  RRPC_RETURN_NOT_OK(Call("/v3/kv/range", ToJson(req), &body));
  gw::RangeResponse resp;
  RRPC_RETURN_NOT_OK(FromJson(body, &resp));
  if (resp.kvs_size() == 0) return Status::NotFound("no such key in etcd", key);
  return KeyValue{resp.kvs(0).key(), resp.kvs(0).value(), resp.kvs(0).lease()};
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  gw::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  std::string body;
  return Call("/v3/kv/put", ToJson(req), &body);
}

Status EtcdClient::Delete(const std::string& key) {
  gw::DeleteRangeRequest req;
  req.set_key(key);
  std::string body;
  return Call("/v3/kv/deleterange", ToJson(req), &body);
}

Result<int64_t> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  gw::LeaseGrantRequest req;
  req.set_ttl(ttl_seconds);
  std::string body;
  RRPC_RETURN_NOT_OK(Call("/v3/lease/grant", ToJson(req), &body));
  gw::LeaseGrantResponse resp;
  RRPC_RETURN_NOT_OK(FromJson(body, &resp));
  if (resp.id() == 0) return Status::RemoteError("etcd granted no lease", body.substr(0, 200));
  return resp.id();
}

Result<int64_t> EtcdClient::LeaseKeepAlive(int64_t lease) {
  gw::LeaseIdRequest req;
  req.set_id(lease);
  std::string body;
  RRPC_RETURN_NOT_OK(Call("/v3/lease/keepalive", ToJson(req), &body));
  // A stream of one item (the gateway ends it when our request body ends).
  const size_t eol = body.find('\n');
  gw::LeaseKeepAliveStreamItem item;
  RRPC_RETURN_NOT_OK(FromJson(body.substr(0, eol), &item));
  if (item.has_error()) return Status::RemoteError("etcd keepalive: " + item.error().message());
  return item.result().ttl();
}

Status EtcdClient::LeaseRevoke(int64_t lease) {
  gw::LeaseIdRequest req;
  req.set_id(lease);
  std::string body;
  return Call("/v3/lease/revoke", ToJson(req), &body);
}

Status EtcdClient::Watch(const std::string& prefix, int64_t start_revision,
                         const std::function<void()>& on_created,
                         const std::function<void(const std::vector<Event>&)>& on_events) {
  gw::WatchRequest req;
  req.mutable_create_request()->set_key(prefix);
  req.mutable_create_request()->set_range_end(PrefixRangeEnd(prefix));
  req.mutable_create_request()->set_start_revision(start_revision);
  const std::string body = ToJson(req);
  Status last;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t e = (current_ + i) % endpoints_.size();
    const MonoTime deadline = MonoTime::Now() + timeout_;
    HttpConnection conn(endpoints_[e], stop_);
    int status = 0;
    Status s = conn.Post("/v3/watch", body, deadline);
    if (s.ok()) s = conn.ReadHead(deadline, &status);
    if (s.ok() && status != 200) return GatewayError(status, "");
    if (!s.ok()) {
      if (!Unreachable(s)) return s;
      last = s;
      continue;
    }
    current_ = e;
    std::string line;
    std::vector<Event> events;
    // One JSON object a line; the stream has no end but etcd's going away.
    s = conn.ReadBody(MonoTime::Max(), [&](const char* data, size_t n) -> Status {
      for (size_t k = 0; k < n; ++k) {
        if (data[k] != '\n') {
          if (line.size() >= kMaxBodyBytes) return Status::Corruption("etcd watch line too long");
          line.push_back(data[k]);
          continue;
        }
        gw::WatchStreamItem item;
        RRPC_RETURN_NOT_OK(FromJson(line, &item));
        line.clear();
        if (item.has_error()) {
          return Status::NetworkError("etcd watch: " + item.error().message());
        }
        const gw::WatchResponse& w = item.result();
        if (w.canceled()) {
          return Status::IllegalState("etcd cancelled the watch: " + w.cancel_reason() +
                                      (w.compact_revision() > 0 ? " (compacted)" : ""));
        }
        if (w.created()) on_created();
        if (w.events_size() == 0) continue;
        events.clear();
        for (const gw::Event& ev : w.events()) {
          events.push_back({ev.type() == gw::Event::DELETE, ev.kv().key(), ev.kv().value()});
        }
        on_events(events);
      }
      return Status::OK();
    });
    if (s.ok())
      return Status::NetworkError("etcd ended the watch stream", endpoints_[e].ToString());
    if (s.IsEndOfFile()) return Status::NetworkError(s.message());
    return s;
  }
  return last;
}

}  // namespace rrpc::rpc
