// rpc-bench: rrpc's benchmark. Runs an echo server (in this process, or elsewhere with
// --server_addr, or only the server with --server_only) and clients in one of its modes, checks
// every response, and prints a summary and one RESULT line (bench_report.h). See --help.
//
//   rpc-bench --mode=throughput --run_seconds=5 --payload_bytes=64
//   rpc-bench --mode=stream --stream_direction=down --payload_bytes=65536 --streams=1
//   rpc-bench --server_only --port=7000 &   rpc-bench --server_addr=127.0.0.1:7000
//   rpc-bench --webserver_port=8080 --run_seconds=60   (then open http://127.0.0.1:8080/)
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/bench_config.h"
#include "bench/bench_modes.h"
#include "bench/bench_report.h"
#include "bench/bench_runner.h"
#include "bench/bench_service.h"
#include "bench/bench_tls.h"
#include "bench/bench_usage.h"
#include "rpc/rdma/rdma_check.h"
#include "rpc/rdma/rdma_flags.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/messenger_flags.h"
#include "rrpc/util/command_line.h"
#include "server/web/web_dashboard.h"
#include "server/web/web_pages.h"
#include "server/web/webserver.h"
#include "util/metrics/metric_registry.h"

DEFINE_string(mode, "throughput",
              "throughput: async calls kept in flight; latency: one call at a time; "
              "cps: a new connection per call; sparse: many connections, each called rarely; "
              "mixed: small calls one at a time (their latency is reported) beside bulk calls; "
              "stream: --streams streams on one connection (--stream_direction), messages of "
              "--payload_bytes (+ --sidecar_bytes); "
              "rdma-check: list the RDMA devices, ports and GIDs, the locked-memory limit, and "
              "try one loopback RDMA message (with --rdma_backend), then exit");
DEFINE_string(
    transport, "tcp",
    "tcp, tls or rdma. tls: the server requires TLS 1.3/1.2 on its port, with the --rpc_* "
    "certificate flags or else a throwaway CA and certificate made at start "
    "(docs/security.md). rdma: connections upgrade to RDMA after negotiating, on the "
    "--rdma_backend (verbs: a NIC; soft: the software NIC, same host only; throughput, "
    "latency and stream modes).");
DEFINE_bool(tls_resume_sessions, false,
            "cps over TLS: each connection resumes its thread's previous session (a TLS 1.3 "
            "ticket) instead of a full handshake.");
DEFINE_string(server_addr, "",
              "host:port of a running rpc-bench server (--server_only); empty runs the server in "
              "this process on 127.0.0.1 with an ephemeral port");
DEFINE_int32(server_reactors, 2, "Server reactor threads (each accepts and does socket I/O)");
DEFINE_int32(worker_threads, 2, "Server worker threads running the echo handler");
DEFINE_bool(inline_handlers, false,
            "Server: run the echo handler on the reactor that read the call instead of a worker "
            "(RpcMethodInfo::run_inline)");
DEFINE_string(target, "",
              "Call the servers of this cluster target through a channel (e.g. "
              "list://h1:7000,h2:7000; see docs/cluster.md) instead of --server_addr; throughput "
              "and latency modes. Like --server_addr, runs no server in this process");
DEFINE_string(latency_calls, "async",
              "latency mode: async: each call is issued by the previous call's callback on the "
              "client reactor; sync: a client thread makes synchronous calls");
DEFINE_int32(client_reactors, 2, "Client messenger reactor threads (throughput, latency)");
DEFINE_int32(client_threads, 2,
             "Client threads: each starts its share of calls (throughput) or opens connections "
             "in a loop (cps); latency mode always uses one");
DEFINE_int32(async_call_concurrency, 64,
             "throughput: calls each client thread keeps in flight; more raises throughput until "
             "the server saturates, then only adds queueing latency");
DEFINE_double(run_seconds, 5, "Length of the measuring window, in seconds");
DEFINE_double(warmup_seconds, 1, "Seconds of load before the window opens (not counted)");
DEFINE_int32(payload_bytes, 64, "Request payload, in bytes");
DEFINE_string(compression, "none",
              "Codec of the client's calls and streams: none, lz4 or zstd (docs/compression.md); "
              "the server answers compressed calls in kind and compresses a stream's messages "
              "with its codec. Bodies under 1 KiB, or that do not shrink, go as they are");
DEFINE_string(payload_kind, "random",
              "Request (and stream message) payload bytes: random (incompressible) or text (like "
              "kv values)");
DEFINE_int32(response_bytes, -1, "Response payload, in bytes; -1: the same as --payload_bytes");
DEFINE_int32(sidecar_bytes, 0,
             "Bytes of one request sidecar, echoed back as a response sidecar; 0: none");
DEFINE_int32(service_queue_length, 1024,
             "Server: calls that may wait for a worker; beyond it calls are refused as too busy "
             "(throughput mode sends them again after a jittered backoff, within their deadline, "
             "and reports rejected_per_sec and retries_per_call)");
DEFINE_int32(call_timeout_ms, 10000,
             "Deadline of each call, over all its too-busy retries (and of each socket wait of "
             "cps/sparse clients); a call that misses it fails the run");
DEFINE_bool(json, false, "Also print the result as one JSON object");
DEFINE_int32(mixed_bulk_streams, 1,
             "mixed: bulk calls kept in flight beside the small calls (0: none, the baseline)");
DEFINE_int32(mixed_bulk_bytes, 1 << 20, "mixed: the sidecar of each bulk call, in bytes");
DEFINE_bool(mixed_separate_messenger, false,
            "mixed: bulk calls through a client messenger of their own (their own connection and "
            "reactor) instead of the small calls' one (which splits them onto a connection of "
            "their own when they reach --rpc_bulk_connection_bytes)");
DEFINE_int32(streams, 1, "stream: streams open at once on the client's one connection");
DEFINE_string(stream_direction, "down",
              "stream: down: the server streams to the client (server streaming); up: the client "
              "to the server (client streaming); bidi: the client streams and the server echoes "
              "each message back (reported: the echoes)");
DEFINE_bool(with_unary_probe, false,
            "stream: beside the streams, one chain of --payload_bytes unary Echo calls (one at a "
            "time) to the same server through the same proxy (another connection than the "
            "streams' unless --rpc_bulk_connection_bytes=0); their rate and latency are "
            "reported as probe_*");
DEFINE_int32(connections, 10000, "sparse: connections held open");
DEFINE_int32(senders, 2, "sparse: threads that go round the connections making calls");
DEFINE_int64(sleep_us, 1000, "sparse: each sender's pause between calls, in microseconds");
DEFINE_string(sparse_client, "auto",
              "sparse: who holds the connections. raw: hand-made TCP connections (about 12 B "
              "each, so RSS shows the server's cost); messenger: one rrpc client Messenger over "
              "--transport, connection i to 127.<i/250>.<i%250+1> at the server's port (the "
              "server must listen on 0.0.0.0: the in-process one does, a --server_only one needs "
              "--bind_host=0.0.0.0); auto: messenger over rdma, raw otherwise");
DEFINE_string(cps_client, "auto",
              "cps: who opens the connections. raw: hand-made TCP connections; messenger: one "
              "rrpc client Messenger over --transport (each client thread calls its own "
              "127.0.0.x at the server's port and shuts the connection down after the call; the "
              "server must listen on 0.0.0.0, as for --sparse_client); auto: messenger over rdma, "
              "raw otherwise");
DEFINE_double(sparse_hold_seconds, 0,
              "sparse over the messenger: seconds the established connections stay idle before "
              "the calls start (to read the server's RSS with all of them idle)");
DEFINE_bool(server_only, false,
            "Run only the server, on --bind_host:--port, until SIGINT or SIGTERM");
DEFINE_string(bind_host, "127.0.0.1", "--server_only: address to listen on");
DEFINE_int32(port, 0, "--server_only: port to listen on; 0 picks a free one (printed)");
DEFINE_int32(webserver_port, 0,
             "Serve the web UI (dashboard, /metrics, /rpcz, ...) of the in-process server on "
             "127.0.0.1:<port> while the benchmark runs; 0: no web UI. The server's metrics are "
             "kept unless --rpc_enable_metrics=false");
DEFINE_double(webserver_linger_seconds, 0,
              "With --webserver_port: seconds to keep serving the web UI after the run's report "
              "(the server stays up, idle), so the final numbers can be looked at");
DEFINE_bool(corrupt_responses_for_test, false,
            "Testing only: the server damages every response, which must fail the run");

namespace rrpc::bench {
namespace {

// Exit codes: 0 success, 1 the run failed (a call failed or a response was wrong), 2 bad flags.
constexpr int kExitRunFailed = 1;
constexpr int kExitUsage = 2;
// rrpc's default maximum message size; requests and responses must fit in it.
constexpr int64_t kMaxMessageBytes = 64 * 1024 * 1024;

// Checks the flags and fills everything but the server address. A message on a bad value.
bool ConfigFromFlags(BenchConfig* c, std::string* error) {
  if (FLAGS_mode == "throughput") {
    c->mode = BenchMode::kThroughput;
  } else if (FLAGS_mode == "latency") {
    c->mode = BenchMode::kLatency;
  } else if (FLAGS_mode == "cps") {
    c->mode = BenchMode::kCps;
  } else if (FLAGS_mode == "sparse") {
    c->mode = BenchMode::kSparse;
  } else if (FLAGS_mode == "mixed") {
    c->mode = BenchMode::kMixed;
  } else if (FLAGS_mode == "stream") {
    c->mode = BenchMode::kStream;
  } else {
    *error = "--mode must be throughput, latency, cps, sparse, mixed or stream, not '" +
             FLAGS_mode + "'";
    return false;
  }
  if (FLAGS_stream_direction == "down") {
    c->stream_direction = StreamDirection::kDown;
  } else if (FLAGS_stream_direction == "up") {
    c->stream_direction = StreamDirection::kUp;
  } else if (FLAGS_stream_direction == "bidi") {
    c->stream_direction = StreamDirection::kBidi;
  } else {
    *error = "--stream_direction must be down, up or bidi, not '" + FLAGS_stream_direction + "'";
    return false;
  }
  c->streams = FLAGS_streams;
  c->with_unary_probe = FLAGS_with_unary_probe;
  if (FLAGS_transport != "tcp" && FLAGS_transport != "tls" && FLAGS_transport != "rdma") {
    *error = "--transport must be tcp, tls or rdma, not '" + FLAGS_transport + "'";
    return false;
  }
  if (FLAGS_sparse_client != "auto" && FLAGS_sparse_client != "raw" &&
      FLAGS_sparse_client != "messenger") {
    *error = "--sparse_client must be auto, raw or messenger";
    return false;
  }
  c->sparse_messenger_client = c->mode == BenchMode::kSparse &&
                               (FLAGS_sparse_client == "messenger" ||
                                (FLAGS_sparse_client == "auto" && FLAGS_transport == "rdma"));
  if (FLAGS_cps_client != "auto" && FLAGS_cps_client != "raw" && FLAGS_cps_client != "messenger") {
    *error = "--cps_client must be auto, raw or messenger";
    return false;
  }
  c->cps_messenger_client =
      c->mode == BenchMode::kCps && (FLAGS_cps_client == "messenger" ||
                                     (FLAGS_cps_client == "auto" && FLAGS_transport == "rdma"));
  if (!(FLAGS_sparse_hold_seconds >= 0)) {
    *error = "--sparse_hold_seconds must not be negative";
    return false;
  }
  c->sparse_hold_seconds = FLAGS_sparse_hold_seconds;
  if (FLAGS_transport == "rdma" && c->mode != BenchMode::kThroughput &&
      c->mode != BenchMode::kLatency && c->mode != BenchMode::kStream &&
      !c->sparse_messenger_client && !c->cps_messenger_client) {
    // Raw cps and sparse clients (no messenger) can't do the RDMA bootstrap.
    *error = "--transport=rdma needs the messenger client in cps and sparse modes";
    return false;
  }
  c->tls_resume_sessions = FLAGS_tls_resume_sessions;
  struct PositiveFlag {
    const char* name;
    int64_t value;
  };
  for (const PositiveFlag& f :
       {PositiveFlag{"server_reactors", FLAGS_server_reactors},
        PositiveFlag{"worker_threads", FLAGS_worker_threads},
        PositiveFlag{"client_reactors", FLAGS_client_reactors},
        PositiveFlag{"client_threads", FLAGS_client_threads},
        PositiveFlag{"async_call_concurrency", FLAGS_async_call_concurrency},
        PositiveFlag{"service_queue_length", FLAGS_service_queue_length},
        PositiveFlag{"call_timeout_ms", FLAGS_call_timeout_ms},
        PositiveFlag{"connections", FLAGS_connections}, PositiveFlag{"senders", FLAGS_senders},
        PositiveFlag{"streams", FLAGS_streams}}) {
    if (f.value < 1) {
      *error = std::string("--") + f.name + " must be at least 1";
      return false;
    }
  }
  if (!(FLAGS_run_seconds > 0) || !(FLAGS_warmup_seconds >= 0)) {
    *error = "--run_seconds must be positive and --warmup_seconds not negative";
    return false;
  }
  if (FLAGS_payload_bytes < 0 || FLAGS_response_bytes < -1 || FLAGS_sidecar_bytes < 0 ||
      FLAGS_sleep_us < 0) {
    *error = "sizes and --sleep_us must not be negative (--response_bytes may be -1)";
    return false;
  }
  const int64_t response = FLAGS_response_bytes < 0 ? FLAGS_payload_bytes : FLAGS_response_bytes;
  // Leave room for headers below the message size limit.
  if (FLAGS_payload_bytes + int64_t{FLAGS_sidecar_bytes} > kMaxMessageBytes - 4096 ||
      response + int64_t{FLAGS_sidecar_bytes} > kMaxMessageBytes - 4096) {
    *error = "payload, response and sidecar must fit in rrpc's 64 MiB message limit";
    return false;
  }
  c->client_messenger = rpc::MessengerOptionsFromFlags("client");
  if (FLAGS_transport == "rdma") {
    Result<rdma::RdmaOptions> rdma = rdma::RdmaOptionsFromFlags();
    if (!rdma.ok()) {
      *error = rdma.status().message();
      return false;
    }
    c->client_messenger.transport_factory = std::make_shared<rdma::RdmaTransportFactory>(*rdma);
    c->transport = rdma->backend == rdma::RdmaBackend::kSoft ? "rdma-soft" : "rdma-verbs";
  }
  c->client_reactors = FLAGS_client_reactors;
  c->client_threads = c->mode == BenchMode::kLatency ? 1 : FLAGS_client_threads;
  c->async_call_concurrency = FLAGS_async_call_concurrency;
  if (FLAGS_latency_calls != "async" && FLAGS_latency_calls != "sync") {
    *error = "--latency_calls must be async or sync";
    return false;
  }
  c->latency_sync_calls = FLAGS_latency_calls == "sync";
  c->run_seconds = FLAGS_run_seconds;
  c->warmup_seconds = FLAGS_warmup_seconds;
  c->payload_bytes = static_cast<size_t>(FLAGS_payload_bytes);
  if (!rpc::ParseCompressionName(FLAGS_compression, &c->client_messenger.compression.codec)) {
    *error = "--compression must be none, lz4 or zstd, not " + FLAGS_compression;
    return false;
  }
  if (FLAGS_payload_kind != "random" && FLAGS_payload_kind != "text") {
    *error = "--payload_kind must be random or text, not " + FLAGS_payload_kind;
    return false;
  }
  c->text_payload = FLAGS_payload_kind == "text";
  c->response_bytes = static_cast<size_t>(response);
  c->sidecar_bytes = static_cast<size_t>(FLAGS_sidecar_bytes);
  c->call_timeout = MonoDelta::FromMilliseconds(FLAGS_call_timeout_ms);
  c->connections = FLAGS_connections;
  c->senders = FLAGS_senders;
  c->sleep_us = FLAGS_sleep_us;
  if (FLAGS_mixed_bulk_streams < 0 || FLAGS_mixed_bulk_bytes < 0 ||
      FLAGS_mixed_bulk_bytes > kMaxMessageBytes - 4096) {
    *error =
        "--mixed_bulk_streams and --mixed_bulk_bytes must not be negative, and a bulk call "
        "must fit in rrpc's 64 MiB message limit";
    return false;
  }
  c->mixed_bulk_streams = FLAGS_mixed_bulk_streams;
  c->mixed_bulk_bytes = static_cast<size_t>(FLAGS_mixed_bulk_bytes);
  c->mixed_separate_messenger = FLAGS_mixed_separate_messenger;
  return true;
}

BenchServerOptions ServerOptionsFromFlags() {
  BenchServerOptions options;
  options.messenger = rpc::MessengerOptionsFromFlags("server");
  if (FLAGS_transport == "rdma") {
    // Checked in ConfigFromFlags (which runs first).
    options.messenger.transport_factory =
        std::make_shared<rdma::RdmaTransportFactory>(rdma::RdmaOptionsFromFlags().value());
  }
  options.reactors = FLAGS_server_reactors;
  options.workers = FLAGS_worker_threads;
  options.service_queue_length = static_cast<size_t>(FLAGS_service_queue_length);
  options.corrupt_responses_for_test = FLAGS_corrupt_responses_for_test;
  options.inline_handlers = FLAGS_inline_handlers;
  return options;
}

// The web UI of the server messenger, when --webserver_port asks for one. Stop it before the
// messenger is destroyed (its pages read the messenger and its registry).
Result<std::unique_ptr<Webserver>> StartWebUi(rpc::Messenger* server) {
  if (FLAGS_webserver_port == 0) return std::unique_ptr<Webserver>();
  WebserverOptions options;
  options.bind_address = "127.0.0.1:" + std::to_string(FLAGS_webserver_port);
  auto web = std::make_unique<Webserver>(std::move(options));
  RegisterDashboard(web.get());
  if (server->metric_registry() != nullptr) {
    // The dashboard names the process after its "server" entity (top bar, page title).
    server->metric_registry()->FindOrCreateEntity(
        "server", "rpc-bench",
        {{"name", "rpc-bench"}, {"mode", FLAGS_mode}, {"pid", std::to_string(getpid())}});
  }
  WebPagesOptions pages;
  pages.server_name = "rpc-bench";
  RegisterRpcPages(web.get(), server, server->metric_registry(), std::move(pages));
  RRPC_RETURN_NOT_OK(web->Start());
  // Tests parse this line for the address; keep its shape.
  printf("rpc-bench web UI at %s/\n", web->url().c_str());
  fflush(stdout);
  return web;
}

bool CheckWebFlags() {
  if (FLAGS_webserver_port < 0 || FLAGS_webserver_port > 65535) {
    fprintf(stderr, "rpc-bench: --webserver_port must be in [0, 65535]\n");
    return false;
  }
  if (!(FLAGS_webserver_linger_seconds >= 0)) {
    fprintf(stderr, "rpc-bench: --webserver_linger_seconds must not be negative\n");
    return false;
  }
  if (FLAGS_webserver_port != 0 && !FLAGS_server_only && !FLAGS_server_addr.empty()) {
    fprintf(stderr,
            "rpc-bench: --webserver_port shows the in-process server; it does not work with "
            "--server_addr (give it to the --server_only process instead)\n");
    return false;
  }
  return true;
}

int RunServerOnly() {
  if (FLAGS_port < 0 || FLAGS_port > 65535) {
    fprintf(stderr, "rpc-bench: --port must be in [0, 65535]\n");
    return kExitUsage;
  }
  Result<Sockaddr> bind =
      Sockaddr::Parse(FLAGS_bind_host.find(':') != std::string::npos
                          ? "[" + FLAGS_bind_host + "]:" + std::to_string(FLAGS_port)
                          : FLAGS_bind_host + ":" + std::to_string(FLAGS_port));
  if (!bind.ok()) {
    fprintf(stderr, "rpc-bench: bad --bind_host: %s\n", bind.status().ToString().c_str());
    return kExitUsage;
  }
  // Block the stop signals in every thread (the server's threads inherit this mask) and take
  // them with sigwait on this one.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  BenchServerOptions options = ServerOptionsFromFlags();
  options.bind_address = *bind;
  if (FLAGS_transport == "tls") {
    BenchConfig unused;
    Result<std::string> note = ConfigureBenchTls(&options.messenger, &unused);
    if (!note.ok()) {
      fprintf(stderr, "rpc-bench: %s\n", note.status().ToString().c_str());
      return kExitUsage;
    }
    printf("rpc-bench server: %s (clients: --rpc_ca_certificate_file=%s)\n", note->c_str(),
           options.messenger.security.ca_certificate_file.c_str());
  }
  Sockaddr bound;
  Result<std::shared_ptr<rpc::Messenger>> server = StartBenchServer(options, &bound);
  if (!server.ok()) {
    fprintf(stderr, "rpc-bench: cannot start the server: %s\n", server.status().ToString().c_str());
    return kExitRunFailed;
  }
  printf("rpc-bench server listening on %s (%d reactors, %d workers); SIGINT or SIGTERM stops it\n",
         bound.ToString().c_str(), options.reactors, options.workers);
  fflush(stdout);
  Result<std::unique_ptr<Webserver>> web = StartWebUi(server->get());
  if (!web.ok()) {
    (*server)->Shutdown();
    fprintf(stderr, "rpc-bench: cannot start the web UI: %s\n", web.status().ToString().c_str());
    return kExitRunFailed;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  // Memory before the shutdown closes the connections (sparse runs against this server).
  const int64_t rss_kb = ReadProcessStatusKb("VmRSS");
  if (*web) (*web)->Stop();
  (*server)->Shutdown();
  printf("rpc-bench server stopped by signal %d; RSS %" PRId64 " kB, peak %" PRId64 " kB\n", sig,
         rss_kb, ReadProcessStatusKb("VmHWM"));
  return 0;
}

int Run() {
  if (!CheckWebFlags()) return kExitUsage;
  if (FLAGS_transport == "rdma" && !rdma::RdmaOptionsFromFlags().ok()) {
    fprintf(stderr, "rpc-bench: %s\n", rdma::RdmaOptionsFromFlags().status().message().c_str());
    return kExitUsage;
  }
  if (FLAGS_transport == "rdma" && FLAGS_mode != "rdma-check") {
    const Status usable = rdma::ProbeRdmaDevice(rdma::RdmaOptionsFromFlags().value());
    if (!usable.ok()) {
      fprintf(stderr,
              "rpc-bench: --transport=rdma: %s; connections stay on TCP (--rdma_backend=soft: "
              "the software NIC)\n",
              usable.ToString().c_str());
    }
  }
  if (FLAGS_mode == "rdma-check") {
    Result<rdma::RdmaOptions> options = rdma::RdmaOptionsFromFlags();
    if (!options.ok()) {
      fprintf(stderr, "rpc-bench: %s\n", options.status().message().c_str());
      return kExitUsage;
    }
    rdma::RdmaCheckResult check = rdma::RunRdmaCheck(*options);
    fputs(check.report.c_str(), stdout);
    return check.ok ? 0 : 1;
  }
  if (FLAGS_server_only) return RunServerOnly();
  BenchConfig config;
  std::string error;
  if (!ConfigFromFlags(&config, &error)) {
    fprintf(stderr, "rpc-bench: %s\n", error.c_str());
    return kExitUsage;
  }

  BenchServerOptions server_options = ServerOptionsFromFlags();
  if (FLAGS_transport == "tls") {
    Status s = Status::OK();
    if (FLAGS_server_addr.empty() && FLAGS_target.empty()) {
      Result<std::string> note = ConfigureBenchTls(&server_options.messenger, &config);
      if (note.ok()) fprintf(stderr, "rpc-bench: %s\n", note->c_str());
      s = note.status();
    } else {
      s = ConfigureBenchTlsClient(&config);
    }
    if (!s.ok()) {
      fprintf(stderr, "rpc-bench: %s\n", s.ToString().c_str());
      return kExitUsage;
    }
  }
  std::shared_ptr<rpc::Messenger> server;
  if (!FLAGS_target.empty()) {
    if (config.mode != BenchMode::kThroughput && config.mode != BenchMode::kLatency) {
      fprintf(stderr, "rpc-bench: --target works in throughput and latency modes only\n");
      return kExitUsage;
    }
    config.target = FLAGS_target;
    config.in_process_server = false;
  } else if (FLAGS_server_addr.empty()) {
    // The messenger's sparse connections go to distinct loopback addresses (127.x.y.z).
    if (config.sparse_messenger_client || config.cps_messenger_client) {
      server_options.bind_address = Sockaddr::Parse("0.0.0.0:0").value();
    }
    Result<std::shared_ptr<rpc::Messenger>> started =
        StartBenchServer(server_options, &config.server);
    if (!started.ok()) {
      fprintf(stderr, "rpc-bench: cannot start the in-process server: %s\n",
              started.status().ToString().c_str());
      return kExitRunFailed;
    }
    server = std::move(started).value();
    config.in_process_server = true;
  } else {
    Result<Sockaddr> addr = Sockaddr::Parse(FLAGS_server_addr);
    if (!addr.ok()) {
      fprintf(stderr, "rpc-bench: bad --server_addr: %s\n", addr.status().ToString().c_str());
      return kExitUsage;
    }
    config.server = *addr;
    config.in_process_server = false;
  }
  std::unique_ptr<Webserver> web;
  if (server) {
    Result<std::unique_ptr<Webserver>> started = StartWebUi(server.get());
    if (!started.ok()) {
      server->Shutdown();
      fprintf(stderr, "rpc-bench: cannot start the web UI: %s\n",
              started.status().ToString().c_str());
      return kExitRunFailed;
    }
    web = std::move(started).value();
  }

  RunControl control;
  ModeOutput output;
  Status s;
  switch (config.mode) {
    case BenchMode::kThroughput:
      s = RunThroughputMode(config, &control, &output);
      break;
    case BenchMode::kLatency:
      s = RunLatencyMode(config, &control, &output);
      break;
    case BenchMode::kCps:
      s = config.cps_messenger_client ? RunCpsMessengerMode(config, &control, &output)
                                      : RunCpsMode(config, &control, &output);
      break;
    case BenchMode::kSparse:
      s = config.sparse_messenger_client ? RunSparseMessengerMode(config, &control, &output)
                                         : RunSparseMode(config, &control, &output);
      break;
    case BenchMode::kMixed:
      s = RunMixedMode(config, &control, &output);
      break;
    case BenchMode::kStream:
      s = RunStreamMode(config, &control, &output);
      break;
  }
  if (s.ok() && output.completed == 0) {
    s = Status::IllegalState("no call completed inside the measuring window");
  }
  if (!s.ok()) {
    if (web) web->Stop();
    if (server) server->Shutdown();
    fprintf(stderr, "rpc-bench: FAILED: %s\n", s.ToString().c_str());
    return kExitRunFailed;
  }
  // Report before stopping the server so its memory still counts in the RSS figures.
  PrintReport(config, output, FLAGS_json, stdout);
  if (web) {
    if (FLAGS_webserver_linger_seconds > 0) {
      printf("rpc-bench: the web UI stays up for %.0f s more at %s/\n",
             FLAGS_webserver_linger_seconds, web->url().c_str());
      fflush(stdout);
      SleepFor(MonoDelta::FromSeconds(FLAGS_webserver_linger_seconds));
    }
    web->Stop();
  }
  if (server) server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace rrpc::bench

int main(int argc, char** argv) {
  // Logs go to stderr unless asked otherwise: a benchmark run should leave no log files behind.
  gflags::SetCommandLineOptionWithMode("logtostderr", "true", gflags::SET_FLAGS_DEFAULT);
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"rpc-bench [--mode=throughput|latency|cps|sparse|mixed|stream] [--payload_bytes=N] [flags]",
       "rrpc's benchmark: an echo server and clients in one of its modes; prints a summary and\n"
       "one RESULT line. The --rpc_* messenger flags apply to both messengers, except that\n"
       "--server_reactors, --worker_threads, --service_queue_length and --client_reactors\n"
       "replace --rpc_num_reactors, --rpc_num_workers and --rpc_service_queue_length.",
       {"bench/rpc_bench_main.cc", "rpc/messenger_flags.cc", "rpc/security_flags.cc"}});
  google::InitGoogleLogging(argv[0]);
  return rrpc::bench::Run();
}
