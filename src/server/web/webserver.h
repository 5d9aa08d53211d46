// Webserver: the embedded HTTP(S) server behind the operator web UI (dashboard, /metrics,
// /rpcz, ...). A thin owner of a civetweb context that dispatches exact paths to PageHandlers.
//
// It shares nothing with the RPC side: civetweb runs its own small thread pool (one blocking
// thread per connection being served), so a slow browser or a malicious client can at worst
// stall the web UI, never a reactor or an RPC worker. Requests it cannot serve get a 4xx:
// 400 malformed, 404 unknown path, 405 method not allowed for the page, 411 body of unknown
// length, 413 body larger than max_body_bytes, 431 headers larger than max_header_bytes.
// civetweb listens on a private loopback port behind WebHttpFrontend, which owns the public port
// (HTTP, or HTTPS terminated there: a connection cap, and only complete requests reach civetweb's
// threads); it answers 403 to anything that did not come through the frontend.
//
// Thread-safety: RegisterPage/RegisterStaticAsset may be called from any thread, before or
// after Start(). Start() and Stop() must not race with each other. Handlers run on civetweb's
// threads, possibly several at once, so they must be thread-safe; they must not call Stop().
//
//   WebserverOptions opts;                       // 127.0.0.1, ephemeral port
//   Webserver web(opts);
//   web.RegisterPage("/healthz", [](const WebRequest&, WebResponse* resp) {
//     resp->body = "OK\n";
//   });
//   RRPC_RETURN_NOT_OK(web.Start());
//   LOG(INFO) << "web UI at " << web.url();
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rrpc/util/mutex.h"
#include "rrpc/util/status.h"

struct mg_connection;
struct mg_context;

namespace rrpc {

class MetricRegistry;
class WebHttpFrontend;
namespace security {
class TlsContext;
}

struct WebserverOptions {
  // "ipv4:port". Port 0 picks a free port; bound_port() reports it after Start(). Bind to
  // 0.0.0.0 only on trusted networks: the UI has no authentication.
  std::string bind_address = "127.0.0.1:0";
  // civetweb worker threads: the most connections served at once (no keep-alive, so a browser
  // holds a thread only while a request is in flight). A client that connects and sends
  // nothing, or sends slowly, holds one until request_timeout_ms: with 2 threads, two idle
  // connections kept /healthz from answering for 10 s. An idle thread costs a stack's memory.
  int num_threads = 16;
  // TLS: when tls_certificate_path is set the server speaks only HTTPS. The certificate file is
  // PEM (leaf first, then any chain); the key is read from tls_private_key_path, or from the
  // certificate file when that is empty. TLS 1.2 is the minimum version. TLS is terminated by
  // WebHttpFrontend on its event loop (web_client_tls.h), with rpc/security's TlsContext, not by
  // civetweb: Debian's civetweb 1.15 loads OpenSSL by name at run time ("libssl.so") and looks up
  // SSL_get_peer_certificate, which OpenSSL 3 no longer exports, so its HTTPS cannot start
  // (civetweb issue #1334).
  std::string tls_certificate_path;
  std::string tls_private_key_path;
  // With TLS: PEM CAs whose client certificates the UI demands (mutual TLS: an operator's
  // certificate instead of a password); empty: any client.
  std::string tls_ca_certificate_path;
  // Largest request line plus headers; larger requests get 431 (or 400 beyond twice this,
  // where civetweb's own buffer ends).
  size_t max_header_bytes = 16 * 1024;
  // Largest request body (POST); larger ones get 413 before the body is read.
  size_t max_body_bytes = 64 * 1024;
  // A client that sends its request slower than this loses the connection (bounds how long a
  // slow or idle client holds a worker thread). Pages are small and answered at once, so a
  // short timeout costs a well-behaved client nothing.
  int request_timeout_ms = 3000;
  // Accepted connections waiting for a free thread; beyond it, new ones wait in the listen
  // backlog (listen_backlog) until a thread frees.
  int max_queued_connections = 64;
  int listen_backlog = 128;
  // Open connections at the public port, HTTP or HTTPS (WebHttpFrontend, which reads each
  // request before civetweb sees it). At the cap a new connection replaces the oldest one still
  // sending its request, or gets 503. Idle connections cost a descriptor each, no thread.
  size_t max_connections = 128;
  // Where the frontend's metrics go (web_connections_open, web_connections_refused_total,
  // web_request_timeouts_total); nullptr: none. Not owned; must outlive the Webserver.
  MetricRegistry* metric_registry = nullptr;
};

// What a PageHandler sees of one HTTP request.
struct WebRequest {
  std::string method;  // "GET", "HEAD", "POST".
  std::string path;    // URL-decoded path without the query, e.g. "/metrics.json".
  // URL-decoded query parameters ("a=1&b=x%20y" -> {a: "1", b: "x y"}); the last of repeated
  // keys wins; a key without '=' maps to ""; a malformed escape ("%zz") is kept literally.
  std::map<std::string, std::string> query_params;
  // Request headers as received (names in the client's case).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;            // At most WebserverOptions::max_body_bytes.
  std::string remote_address;  // "ip:port" of the client.

  // Value of query parameter `key`, or `default_value` when absent.
  std::string GetParam(const std::string& key, std::string default_value = "") const;
  // Value of the first header named `name` (case-insensitive), or "" when absent.
  std::string GetHeader(std::string_view name) const;
};

// What a PageHandler fills in. The Webserver adds Content-Length, Connection: close and
// conservative security headers (nosniff, no framing, same-origin-only content policy).
struct WebResponse {
  int status = 200;
  // Plain text by default so that a page forgetting to escape can't inject markup.
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra headers; names and values containing CR or LF are dropped.
  std::vector<std::pair<std::string, std::string>> headers;
};

using PageHandler = std::function<void(const WebRequest& req, WebResponse* resp)>;

class Webserver {
 public:
  // Methods a page accepts. HEAD is served wherever GET is (the handler runs, the body is not
  // sent).
  enum Method : uint32_t { kGet = 1, kPost = 2 };

  explicit Webserver(WebserverOptions options);
  ~Webserver();  // Stops the server if running.

  Webserver(const Webserver&) = delete;
  Webserver& operator=(const Webserver&) = delete;

  // Serves `path` (exact match, starting with '/') with `handler`; replaces an earlier page or
  // asset at the same path. `methods` is a mask of Method values.
  void RegisterPage(std::string path, PageHandler handler, uint32_t methods = kGet);

  // Serves a copy of `data` at `path` with `content_type` (GET/HEAD only).
  void RegisterStaticAsset(std::string path, std::string content_type, std::string_view data);

  // Binds and starts serving. Fails with the reason (bad address, port in use, bad TLS files).
  Status Start();

  // Stops accepting, waits for in-flight requests to finish and joins civetweb's threads.
  // Idempotent. Must not be called from a PageHandler.
  void Stop();
  // With TLS: reads the certificate and key files again (new connections use them; on error the
  // old ones stay). Without TLS or before Start(): IllegalState. Thread-safe against handlers,
  // not against Start()/Stop().
  Status ReloadTlsCertificates();

  bool is_running() const { return ctx_ != nullptr; }
  bool is_tls() const { return !options_.tls_certificate_path.empty(); }
  // The port actually bound (meaningful after a successful Start()).
  uint16_t bound_port() const { return bound_port_; }
  // "http://127.0.0.1:8080" or "https://...": the bound address as a URL.
  std::string url() const;
  // The port civetweb itself listens on: bound_port() without TLS; with TLS a private loopback
  // port that only answers connections relayed by the TLS frontend (others get 403).
  uint16_t civetweb_port() const { return civetweb_port_; }

 private:
  struct Page {
    PageHandler handler;
    uint32_t methods;
  };

  // civetweb callbacks (C linkage-compatible static trampolines).
  static int HandleRequestThunk(mg_connection* conn, void* cbdata);
  static int HandleHttpErrorThunk(mg_connection* conn, int status, const char* msg);
  static int LogMessageThunk(const mg_connection* conn, const char* message);

  int HandleRequest(mg_connection* conn);
  int HandleHttpError(mg_connection* conn, int status, const char* msg);
  // Stops civetweb; wakes its accept loop so that this takes milliseconds, not seconds.
  void StopCivetweb();

  // Looks up the page for `path` (a copy, so it can run without holding mu_).
  std::shared_ptr<const Page> FindPage(const std::string& path) const;

  const WebserverOptions options_;
  std::string bind_host_;  // Parsed from options_.bind_address by Start().

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const Page>> pages_ RRPC_GUARDED_BY(mu_);

  mg_context* ctx_ = nullptr;  // Owned; freed by mg_stop().
  uint16_t civetweb_port_ = 0;
  std::unique_ptr<security::TlsContext> tls_;       // Set while running with TLS.
  std::unique_ptr<WebHttpFrontend> http_frontend_;  // Set while running.
  uint16_t bound_port_ = 0;
};

// The canonical reason phrase of an HTTP status ("Not Found"), or "Unknown".
const char* HttpStatusReason(int status);

}  // namespace rrpc
