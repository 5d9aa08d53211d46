#include "server/web/webserver.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "rpc/security/tls_context.h"
#include "server/web/web_http_frontend.h"

namespace rrpc {

namespace {

// Added to every response. The UI never needs another origin, frames or inline code, so the
// browser is told to refuse them: a bug in a page's escaping then can't run injected script.
constexpr const char* kSecurityHeaders =
    "X-Content-Type-Options: nosniff\r\n"
    "X-Frame-Options: DENY\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "Content-Security-Policy: default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'\r\n";

bool HasLineBreak(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// Splits "host:port" (IPv4 literal host) into its parts.
Status ParseBindAddress(const std::string& addr, std::string* host, uint16_t* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) {
    return Status::InvalidArgument("web server bind address must be ipv4:port", addr);
  }
  *host = addr.substr(0, colon);
  in_addr unused;
  if (inet_pton(AF_INET, host->c_str(), &unused) != 1) {
    return Status::InvalidArgument("web server bind host must be an IPv4 literal", addr);
  }
  std::string port_str = addr.substr(colon + 1);
  if (port_str.size() > 5 ||
      !std::all_of(port_str.begin(), port_str.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::InvalidArgument("web server bind port is not a number", addr);
  }
  unsigned long p = std::stoul(port_str);
  if (p > 65535) return Status::InvalidArgument("web server bind port out of range", addr);
  *port = static_cast<uint16_t>(p);
  return Status::OK();
}

// URL-decodes a query component ('+' is a space; a malformed escape such as "%zz" is kept as
// is, civetweb's lenient decoding).
std::string DecodeQueryComponent(std::string_view in) {
  std::string out(in.size() + 1, '\0');  // Decoding never lengthens.
  int n = mg_url_decode(in.data(), static_cast<int>(in.size()), out.data(),
                        static_cast<int>(out.size()), /*is_form_url_encoded=*/1);
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

void ParseQuery(const char* query, std::map<std::string, std::string>* params) {
  if (query == nullptr) return;
  std::string_view rest(query);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view item = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string value =
        eq == std::string_view::npos ? std::string() : DecodeQueryComponent(item.substr(eq + 1));
    (*params)[DecodeQueryComponent(item.substr(0, eq))] = std::move(value);
  }
}

// Writes a complete response. `head_only` omits the body (HEAD), keeping Content-Length.
void WriteResponse(mg_connection* conn, const WebResponse& resp, bool head_only) {
  std::string head;
  head.reserve(512);
  head.append("HTTP/1.1 ")
      .append(std::to_string(resp.status))
      .append(" ")
      .append(HttpStatusReason(resp.status))
      .append("\r\n");
  head.append("Content-Type: ").append(resp.content_type).append("\r\n");
  head.append("Content-Length: ").append(std::to_string(resp.body.size())).append("\r\n");
  // One request per connection: with thread-per-connection civetweb, an idle keep-alive
  // browser connection would otherwise pin one of the few worker threads.
  head.append("Connection: close\r\n");
  head.append(kSecurityHeaders);
  bool has_cache_control = false;
  for (const auto& [name, value] : resp.headers) {
    if (name.empty() || HasLineBreak(name) || HasLineBreak(value)) {
      LOG(WARNING) << "web server: dropping response header with a line break: " << name;
      continue;
    }
    has_cache_control |= IEquals(name, "Cache-Control");
    head.append(name).append(": ").append(value).append("\r\n");
  }
  // Live pages must never be served stale by a cache.
  if (!has_cache_control) head.append("Cache-Control: no-store\r\n");
  head.append("\r\n");
  if (!head_only) head.append(resp.body);
  // A failed write means the client left; there is nobody to tell.
  mg_write(conn, head.data(), head.size());
}

void WriteError(mg_connection* conn, int status, std::string_view detail, bool head_only,
                std::vector<std::pair<std::string, std::string>> headers = {}) {
  WebResponse resp;
  resp.status = status;
  resp.body = std::to_string(status) + " " + HttpStatusReason(status) + "\n";
  if (!detail.empty()) resp.body.append(detail).append("\n");
  resp.headers = std::move(headers);
  WriteResponse(conn, resp, head_only);
}

// Reads the request body (bounded). Returns 0 or the HTTP status to fail the request with.
int ReadBody(mg_connection* conn, const mg_request_info* ri, size_t max_bytes, std::string* body,
             std::string* why) {
  if (ri->content_length > 0 && static_cast<unsigned long long>(ri->content_length) > max_bytes) {
    *why = "request body of " + std::to_string(ri->content_length) +
           " bytes exceeds the limit of " + std::to_string(max_bytes);
    return 413;
  }
  bool chunked = false;
  if (ri->content_length < 0) {
    const char* te = mg_get_header(conn, "Transfer-Encoding");
    chunked = te != nullptr && strcasecmp(te, "chunked") == 0;
    if (!chunked) return 0;  // No body.
  }
  // For chunked bodies read one byte past the limit to notice an oversized body.
  size_t want = chunked ? max_bytes + 1 : static_cast<size_t>(ri->content_length);
  body->resize(want);
  size_t got = 0;
  while (got < want) {
    int n = mg_read(conn, body->data() + got, want - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  body->resize(got);
  if (chunked && got > max_bytes) {
    *why = "chunked request body exceeds the limit of " + std::to_string(max_bytes) + " bytes";
    return 413;
  }
  if (!chunked && got < want) {
    *why = "request body shorter than its Content-Length";
    return 400;
  }
  return 0;
}

// Bytes of the request line and headers as parsed, to enforce max_header_bytes below civetweb's
// own (larger) buffer. Counts what arrived apart from line-ending whitespace differences.
size_t RequestHeadBytes(const mg_request_info* ri) {
  size_t n = strlen(ri->request_method) + 1 + strlen(ri->request_uri) + 1 + strlen("HTTP/") +
             strlen(ri->http_version) + 2;
  if (ri->query_string != nullptr) n += 1 + strlen(ri->query_string);
  for (int i = 0; i < ri->num_headers; ++i) {
    n += strlen(ri->http_headers[i].name) + 2 + strlen(ri->http_headers[i].value) + 2;
  }
  return n + 2;
}

std::once_flag g_civetweb_init_once;

void InitCivetwebOnce() {
  // Once per process and never undone. No TLS feature: civetweb's run-time OpenSSL loading
  // fails with OpenSSL 3 (see webserver.h, tls_certificate_path), and mg_exit_library would tear
  // down OpenSSL state the rest of the process shares.
  std::call_once(g_civetweb_init_once, [] { mg_init_library(0); });
}

// Connects to and at once closes 127.0.0.1:port (or `host`:port), without blocking.
void PokePort(const std::string& host, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (host == "0.0.0.0" || inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  close(fd);
}

}  // namespace

const char* HttpStatusReason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string WebRequest::GetParam(const std::string& key, std::string default_value) const {
  auto it = query_params.find(key);
  if (it == query_params.end()) return default_value;  // moved out, not copied
  return it->second;
}

std::string WebRequest::GetHeader(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (IEquals(n, name)) return v;
  }
  return "";
}

Webserver::Webserver(WebserverOptions options) : options_(std::move(options)) {}

Webserver::~Webserver() { Stop(); }

void Webserver::RegisterPage(std::string path, PageHandler handler, uint32_t methods) {
  CHECK(!path.empty() && path[0] == '/') << "web page path must start with '/': " << path;
  auto page = std::make_shared<const Page>(Page{std::move(handler), methods});
  MutexLock l(mu_);
  pages_[std::move(path)] = std::move(page);
}

void Webserver::RegisterStaticAsset(std::string path, std::string content_type,
                                    std::string_view data) {
  // Shared by every copy of the handler; immutable once built.
  auto content = std::make_shared<const std::string>(data);
  RegisterPage(std::move(path), [content, content_type = std::move(content_type)](
                                    const WebRequest&, WebResponse* resp) {
    resp->content_type = content_type;
    resp->body = *content;
    // The assets change only with the binary; revalidating each load is cheap.
    resp->headers.emplace_back("Cache-Control", "no-cache");
  });
}

std::shared_ptr<const Webserver::Page> Webserver::FindPage(const std::string& path) const {
  MutexLock l(mu_);
  auto it = pages_.find(path);
  return it == pages_.end() ? nullptr : it->second;
}

std::string Webserver::url() const {
  return std::string(is_tls() ? "https://" : "http://") + bind_host_ + ":" +
         std::to_string(bound_port_);
}

Status Webserver::Start() {
  CHECK(ctx_ == nullptr) << "Webserver started twice";
  uint16_t port = 0;
  RRPC_RETURN_NOT_OK(ParseBindAddress(options_.bind_address, &bind_host_, &port));
  if (options_.num_threads < 1) {
    return Status::InvalidArgument("web server needs at least one thread");
  }
  if (options_.max_header_bytes < 256) {
    return Status::InvalidArgument("web server max_header_bytes must be at least 256");
  }
  InitCivetwebOnce();

  if (options_.max_connections < 1) {
    return Status::InvalidArgument("web server max_connections must be at least 1");
  }
  // One frontend owns the public port, HTTP or HTTPS (it terminates TLS on its event loop, so
  // both are capped and timed alike); civetweb serves only it, on a private loopback port.
  std::unique_ptr<security::TlsContext> tls;
  if (is_tls()) {
    security::TlsContextOptions tls_options;
    tls_options.certificate_file = options_.tls_certificate_path;
    tls_options.private_key_file = options_.tls_private_key_path;
    tls_options.ca_certificate_file = options_.tls_ca_certificate_path;
    tls_options.request_client_certificate = tls_options.require_client_certificate =
        !options_.tls_ca_certificate_path.empty();
    Result<std::unique_ptr<security::TlsContext>> made =
        security::TlsContext::Create(std::move(tls_options));
    if (!made.ok()) return made.status().CloneAndPrepend("could not start HTTPS web server");
    tls = std::move(*made);
  }
  WebHttpFrontend::Options http;
  http.max_connections = options_.max_connections;
  http.request_timeout_ms = options_.request_timeout_ms;
  http.io_timeout_ms = std::max(options_.request_timeout_ms, 10000);
  http.max_header_bytes = options_.max_header_bytes * 2;  // civetweb's buffer, see below
  http.max_body_bytes = options_.max_body_bytes;
  http.metric_registry = options_.metric_registry;
  http.tls = tls.get();
  auto http_frontend = std::make_unique<WebHttpFrontend>(std::move(http));
  Status bound = http_frontend->Bind(bind_host_, port);
  if (!bound.ok()) {
    return bound.CloneAndPrepend(is_tls() ? "could not start HTTPS web server"
                                          : "could not start web server");
  }
  const std::string listening = "127.0.0.1:0";

  std::string threads = std::to_string(options_.num_threads);
  // civetweb's buffer is twice our limit so that most oversized requests still parse and get a
  // precise 431 from HandleRequest; beyond it civetweb answers 400 (see HandleHttpError).
  std::string request_size = std::to_string(options_.max_header_bytes * 2);
  std::string timeout = std::to_string(options_.request_timeout_ms);
  std::string queue = std::to_string(options_.max_queued_connections);
  std::string backlog = std::to_string(options_.listen_backlog);
  // No document_root: civetweb never serves files, runs CGI or lists directories; every
  // request goes through HandleRequest.
  // clang-format off
  const char* cw_options[] = {
      "listening_ports", listening.c_str(),
      "num_threads", threads.c_str(),
      "max_request_size", request_size.c_str(),
      "request_timeout_ms", timeout.c_str(),
      "connection_queue", queue.c_str(),
      "listen_backlog", backlog.c_str(),
      "enable_keep_alive", "no",
      nullptr,
  };
  // clang-format on

  mg_callbacks callbacks;
  memset(&callbacks, 0, sizeof(callbacks));
  // begin_request sees every request before civetweb's own routing (no window after start in
  // which civetweb would answer by itself).
  callbacks.begin_request = [](mg_connection* conn) -> int {
    return HandleRequestThunk(conn, mg_get_user_data(mg_get_context(conn)));
  };
  callbacks.http_error = &HandleHttpErrorThunk;
  callbacks.log_message = &LogMessageThunk;

  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error;
  memset(&error, 0, sizeof(error));
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  mg_init_data init;
  memset(&init, 0, sizeof(init));
  init.callbacks = &callbacks;
  init.user_data = this;
  init.configuration_options = cw_options;

  // Set before mg_start2: HandleRequest reads it from civetweb's threads.
  tls_ = std::move(tls);
  http_frontend_ = std::move(http_frontend);
  ctx_ = mg_start2(&init, &error);
  if (ctx_ == nullptr) {
    http_frontend_.reset();
    tls_.reset();
    return Status::NetworkError("could not start web server",
                                options_.bind_address + ": " + error_text);
  }
  mg_server_port ports[1];
  memset(ports, 0, sizeof(ports));
  if (mg_get_server_ports(ctx_, 1, ports) != 1) {
    Stop();
    return Status::IllegalState("web server started without a listening port");
  }
  civetweb_port_ = static_cast<uint16_t>(ports[0].port);
  Status s = http_frontend_->Start(civetweb_port_);
  if (!s.ok()) {
    Stop();
    return s.CloneAndPrepend("could not start web server");
  }
  bound_port_ = http_frontend_->bound_port();
  VLOG(1) << "web server listening at " << url();
  return Status::OK();
}

Status Webserver::ReloadTlsCertificates() {
  if (tls_ == nullptr) return Status::IllegalState("web UI is not serving TLS");
  return tls_->Reload();
}

void Webserver::Stop() {
  if (ctx_ == nullptr) return;
  if (http_frontend_ != nullptr) http_frontend_->Stop();
  StopCivetweb();
  http_frontend_.reset();
  tls_.reset();
}

void Webserver::StopCivetweb() {
  // civetweb's accept loop checks its stop flag only between polls of up to two seconds; a
  // connection attempt ends the poll early. The waker stops once mg_stop returns.
  std::atomic<bool> stopped{false};
  // civetweb listens on loopback behind either frontend.
  std::string host = "127.0.0.1";
  std::thread waker([&] {
    for (int i = 0; i < 200 && !stopped; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!stopped) PokePort(host, civetweb_port_);
    }
  });
  mg_stop(ctx_);  // Joins the worker threads; no handler runs after this returns.
  stopped = true;
  waker.join();
  ctx_ = nullptr;
}

int Webserver::HandleRequestThunk(mg_connection* conn, void* cbdata) {
  return static_cast<Webserver*>(cbdata)->HandleRequest(conn);
}

int Webserver::HandleHttpErrorThunk(mg_connection* conn, int status, const char* msg) {
  auto* self = static_cast<Webserver*>(mg_get_user_data(mg_get_context(conn)));
  return self->HandleHttpError(conn, status, msg);
}

int Webserver::LogMessageThunk(const mg_connection* conn, const char* message) {
  // civetweb reports client mistakes (malformed requests, resets) here; they are noise at
  // default verbosity.
  VLOG(1) << "civetweb: " << message;
  return 1;  // Handled: civetweb prints nothing itself.
}

int Webserver::HandleRequest(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const std::string method = ri->request_method ? ri->request_method : "";
  const bool head_only = method == "HEAD";
  if (ri->local_uri == nullptr || ri->local_uri[0] != '/') {
    WriteError(conn, 400, "the request target must be a path on this server", head_only);
    return 400;
  }
  if (RequestHeadBytes(ri) > options_.max_header_bytes) {
    WriteError(
        conn, 431,
        "request line and headers exceed " + std::to_string(options_.max_header_bytes) + " bytes",
        head_only);
    return 431;
  }

  WebRequest req;
  req.remote_address = std::string(ri->remote_addr) + ":" + std::to_string(ri->remote_port);
  const uint16_t via_port = static_cast<uint16_t>(ri->remote_port);
  if (http_frontend_ != nullptr && !http_frontend_->LookupClient(via_port, &req.remote_address)) {
    // A local process connected to civetweb's private port directly, around the frontend (its
    // connection cap, and TLS).
    WriteError(
        conn, 403,
        is_tls() ? "this server is served over HTTPS only" : "connect to the web UI's own port",
        head_only);
    return 403;
  }
  req.method = method;
  req.path = ri->local_uri;
  std::shared_ptr<const Page> page = FindPage(req.path);
  if (page == nullptr) {
    WriteError(conn, 404, "no page at " + req.path, head_only);
    return 404;
  }
  bool allowed = ((method == "GET" || head_only) && (page->methods & kGet)) ||
                 (method == "POST" && (page->methods & kPost));
  if (!allowed) {
    std::string allow;
    if (page->methods & kGet) allow = "GET, HEAD";
    if (page->methods & kPost) allow += allow.empty() ? "POST" : ", POST";
    WriteError(conn, 405, method + " is not allowed here", head_only, {{"Allow", allow}});
    return 405;
  }
  std::string why;
  int body_status = ReadBody(conn, ri, options_.max_body_bytes, &req.body, &why);
  if (body_status != 0) {
    WriteError(conn, body_status, why, head_only);
    return body_status;
  }
  ParseQuery(ri->query_string, &req.query_params);
  for (int i = 0; i < ri->num_headers; ++i) {
    req.headers.emplace_back(ri->http_headers[i].name, ri->http_headers[i].value);
  }

  WebResponse resp;
  page->handler(req, &resp);
  if (resp.status < 100 || resp.status > 599) {
    LOG(WARNING) << "web page " << req.path << " returned invalid HTTP status " << resp.status;
    WriteError(conn, 500, "the page handler returned an invalid status", head_only);
    return 500;
  }
  if (HasLineBreak(resp.content_type)) resp.content_type = "application/octet-stream";
  WriteResponse(conn, resp, head_only);
  return resp.status;
}

int Webserver::HandleHttpError(mg_connection* conn, int status, const char* msg) {
  // civetweb rejected the request before HandleRequest saw it. Its own text for a request
  // that overflows its buffer is "Malformed message", which hides the likely cause.
  std::string detail = msg ? msg : "";
  if (status == 400 && detail == "Malformed message") {
    detail = "malformed request, or request line and headers larger than " +
             std::to_string(options_.max_header_bytes) + " bytes";
  }
  WriteError(conn, status, detail, /*head_only=*/false);
  return 0;  // Handled: civetweb sends nothing more.
}

}  // namespace rrpc
