#include "bench/peers/peer_runner.h"

#include <gflags/gflags.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

// The same flags as rpc-bench, so one command line drives every implementation.
DEFINE_string(mode, "throughput",
              "throughput: async_call_concurrency calls outstanding per client thread, reports "
              "reqs/s; latency: one call at a time per client thread; cps: connect, one echo, "
              "close, repeatedly (reqs_per_sec then counts connections); stream: each client "
              "thread reads one stream of --payload_bytes messages the server writes as fast as "
              "it can (one way; reqs_per_sec counts messages, bytes_per_sec is one way)");
DEFINE_double(run_seconds, 5, "Length of the measured window, in seconds");
DEFINE_double(warmup_seconds, 1, "Seconds of load before the measured window starts");
DEFINE_int32(payload_bytes, 64, "Request payload size in bytes");
DEFINE_int32(response_bytes, -1,
             "Response payload size in bytes; -1 = same as --payload_bytes. With --server_only "
             "the server must be given the same value as its clients");
DEFINE_int32(sidecar_bytes, 0,
             "rpc-bench's sidecar size: this many bytes more in every request and every response "
             "(the peers have no sidecars), so both move the same bytes per call");
DEFINE_int32(client_threads, 1,
             "Client threads; each owns one connection (cps: one at a time); latency mode always "
             "uses one");
DEFINE_int32(async_call_concurrency, 64,
             "Calls outstanding per client thread in throughput mode; more hides latency but "
             "queues more in the server");
DEFINE_int32(server_threads, 2,
             "Server threads (raw-tcp: epoll loops with their own SO_REUSEPORT listener; grpc: "
             "completion-queue threads, one CQ each)");
DEFINE_int32(server_workers, 0,
             "raw-tcp only: worker threads that answer the frames the loops read and write the "
             "answers themselves (one thread hop per call, as a worker-pool RPC server makes); 0 "
             "answers on the loop thread");
DEFINE_string(server_addr, "",
              "host:port of a running peer server; empty runs the server in this process on "
              "127.0.0.1 with an ephemeral port");
DEFINE_bool(server_only, false, "Run only the server, on --bind_host:--port, until SIGINT/SIGTERM");
DEFINE_string(bind_host, "127.0.0.1", "Address the --server_only server listens on");
DEFINE_int32(port, 0, "Port the --server_only server listens on; 0 picks a free one (printed)");
DEFINE_bool(corrupt_responses_for_test, false,
            "Test only: the server flips the last byte of every response, so the client's "
            "response check must fail the run");

namespace rrpc {
namespace bench {
namespace {

struct CpuTimes {
  double user_s = 0;
  double sys_s = 0;
  uint64_t context_switches = 0;  // voluntary + involuntary
};

double TimevalSeconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

CpuTimes ProcessCpuNow() {
  rusage ru;
  memset(&ru, 0, sizeof(ru));
  getrusage(RUSAGE_SELF, &ru);
  return CpuTimes{TimevalSeconds(ru.ru_utime), TimevalSeconds(ru.ru_stime),
                  static_cast<uint64_t>(ru.ru_nvcsw + ru.ru_nivcsw)};
}

// Peak resident set size of the process (VmHWM), in kB; -1 if /proc is unreadable.
long PeakRssKb() {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      kb = strtol(line + 6, nullptr, 10);
      break;
    }
  }
  fclose(f);
  return kb;
}

Clock::duration SecondsToDuration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

int RunServerOnly(const char* impl, const PeerConfig& config, const ServerFactory& start_server) {
  // Block the stop signals before any server thread exists, so every thread inherits the mask and
  // sigwait() below is the only receiver.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::string error;
  std::unique_ptr<PeerServer> server = start_server(config, &error);
  if (server == nullptr) Fail("cannot start the %s server: %s", impl, error.c_str());
  printf("%s server listening on %s:%d with %d thread(s); SIGINT or SIGTERM stops it\n", impl,
         config.bind_host.c_str(), server->port(), config.server_threads);
  fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  server->Shutdown();
  printf("%s server stopped by signal %d\n", impl, sig);
  return 0;
}

}  // namespace

const char* ModeName(BenchMode mode) {
  switch (mode) {
    case BenchMode::kLatency:
      return "latency";
    case BenchMode::kThroughput:
      return "throughput";
    case BenchMode::kCps:
      return "cps";
    case BenchMode::kStream:
      return "stream";
  }
  return "?";
}

bool PeerConfigFromFlags(PeerConfig* config, std::string* error) {
  if (FLAGS_mode == "throughput") {
    config->mode = BenchMode::kThroughput;
  } else if (FLAGS_mode == "latency") {
    config->mode = BenchMode::kLatency;
  } else if (FLAGS_mode == "cps") {
    config->mode = BenchMode::kCps;
  } else if (FLAGS_mode == "stream") {
    config->mode = BenchMode::kStream;
  } else {
    *error = "--mode must be throughput, latency, cps or stream, not '" + FLAGS_mode + "'";
    return false;
  }
  constexpr int kMaxPayload = 64 << 20;
  if (FLAGS_payload_bytes < 0 || FLAGS_payload_bytes > kMaxPayload) {
    *error = "--payload_bytes must be in [0, 64 MiB]";
    return false;
  }
  if (FLAGS_response_bytes < -1 || FLAGS_response_bytes > kMaxPayload) {
    *error = "--response_bytes must be -1 or in [0, 64 MiB]";
    return false;
  }
  if (FLAGS_sidecar_bytes < 0 ||
      int64_t{FLAGS_sidecar_bytes} + std::max(FLAGS_payload_bytes, FLAGS_response_bytes) >
          kMaxPayload) {
    *error = "--sidecar_bytes must be >= 0, and with the payload at most 64 MiB";
    return false;
  }
  if (!(FLAGS_run_seconds > 0) || !(FLAGS_warmup_seconds >= 0)) {
    *error = "--run_seconds must be > 0 and --warmup_seconds >= 0";
    return false;
  }
  if (FLAGS_client_threads < 1 || FLAGS_async_call_concurrency < 1 || FLAGS_server_threads < 1) {
    *error = "--client_threads, --async_call_concurrency and --server_threads must be >= 1";
    return false;
  }
  if (FLAGS_server_workers < 0) {
    *error = "--server_workers must be >= 0";
    return false;
  }
  if (FLAGS_port < 0 || FLAGS_port > 65535) {
    *error = "--port must be in [0, 65535]";
    return false;
  }
  config->run_seconds = FLAGS_run_seconds;
  config->warmup_seconds = FLAGS_warmup_seconds;
  const size_t sidecar = static_cast<size_t>(FLAGS_sidecar_bytes);
  config->sidecar_bytes = sidecar;
  config->payload_bytes = FLAGS_payload_bytes + sidecar;
  config->response_bytes = FLAGS_response_bytes < 0
                               ? config->payload_bytes
                               : static_cast<size_t>(FLAGS_response_bytes) + sidecar;
  config->server_response_bytes =
      FLAGS_response_bytes < 0 ? -1 : static_cast<long>(FLAGS_response_bytes + sidecar);
  config->client_threads = FLAGS_client_threads;
  config->async_call_concurrency = FLAGS_async_call_concurrency;
  config->server_threads = FLAGS_server_threads;
  config->server_workers = FLAGS_server_workers;
  config->server_addr = FLAGS_server_addr;
  config->server_only = FLAGS_server_only;
  config->bind_host = FLAGS_bind_host;
  config->port = FLAGS_port;
  config->corrupt_responses_for_test = FLAGS_corrupt_responses_for_test;
  if (!config->server_addr.empty()) {
    std::string host;
    int port = 0;
    if (!SplitHostPort(config->server_addr, &host, &port)) {
      *error = "--server_addr must be host:port, not '" + config->server_addr + "'";
      return false;
    }
  }
  return true;
}

bool SplitHostPort(const std::string& host_port, std::string* host, int* port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) return false;
  char* end = nullptr;
  const long p = strtol(host_port.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535) return false;
  *host = host_port.substr(0, colon);
  *port = static_cast<int>(p);
  return true;
}

void Fail(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  fputs("FATAL: ", stderr);
  vfprintf(stderr, format, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stdout);
  fflush(stderr);
  std::_Exit(1);
}

int RunPeerMain(const char* impl, const ServerFactory& start_server,
                const ClientThreadFn& run_client) {
  // A peer that closed its socket must show up as a write error, not kill the process.
  signal(SIGPIPE, SIG_IGN);

  PeerConfig config;
  std::string error;
  if (!PeerConfigFromFlags(&config, &error)) Fail("%s", error.c_str());
  if (config.server_only) return RunServerOnly(impl, config, start_server);

  std::unique_ptr<PeerServer> server;
  std::string server_addr = config.server_addr;
  if (server_addr.empty()) {
    PeerConfig server_config = config;
    server_config.bind_host = "127.0.0.1";
    server_config.port = 0;
    server = start_server(server_config, &error);
    if (server == nullptr) Fail("cannot start the in-process %s server: %s", impl, error.c_str());
    server_addr = "127.0.0.1:" + std::to_string(server->port());
  }

  MeasureWindow window;
  window.start = Clock::now() + SecondsToDuration(config.warmup_seconds);
  window.end = window.start + SecondsToDuration(config.run_seconds);

  std::vector<std::unique_ptr<ClientStats>> stats;
  std::vector<std::thread> threads;
  for (int i = 0; i < config.ClientThreads(); ++i) {
    stats.push_back(std::make_unique<ClientStats>());
    ClientThreadArgs args;
    args.index = i;
    args.server_addr = server_addr;
    args.window = &window;
    args.stats = stats.back().get();
    threads.emplace_back([&config, &run_client, args] { run_client(config, args); });
  }

  // CPU is the whole process (client and, when in-process, server) over the measured window only.
  std::this_thread::sleep_until(window.start);
  const CpuTimes cpu_start = ProcessCpuNow();
  std::this_thread::sleep_until(window.end);
  const CpuTimes cpu_end = ProcessCpuNow();
  for (std::thread& t : threads) t.join();
  if (server != nullptr) server->Shutdown();

  LatencyHistogram latency;
  uint64_t completed = 0;
  for (const auto& s : stats) {
    latency.Merge(s->latency);
    completed += s->completed;
  }
  if (completed == 0) Fail("no call completed inside the measured window");

  const long rss_kb = PeakRssKb();
  const double reqs_per_sec = static_cast<double>(completed) / config.run_seconds;
  const double p50 = latency.ValueAtPercentile(50) / 1e3;
  const double p99 = latency.ValueAtPercentile(99) / 1e3;
  const double p999 = latency.ValueAtPercentile(99.9) / 1e3;
  const double user_s = cpu_end.user_s - cpu_start.user_s;
  const double sys_s = cpu_end.sys_s - cpu_start.sys_s;
  const double context_switches =
      static_cast<double>(cpu_end.context_switches - cpu_start.context_switches);
  const double n = static_cast<double>(completed);
  const int conc = config.ClientThreads() * config.Depth();
  // Payload bytes moved per second, both directions (rpc-bench reports the same sum); a stream's
  // one way.
  const bool stream = config.mode == BenchMode::kStream;
  const double bytes_per_sec =
      reqs_per_sec * static_cast<double>(stream ? config.payload_bytes
                                                : config.payload_bytes + config.response_bytes);

  printf("%s %s: %zu B requests, %zu B responses; %d client thread(s) x %d outstanding; %s\n", impl,
         ModeName(config.mode), config.payload_bytes, config.response_bytes, config.ClientThreads(),
         config.Depth(),
         server != nullptr ? "in-process server" : ("server at " + server_addr).c_str());
  printf("  %llu %s in %.2f s = %.1f/s\n", static_cast<unsigned long long>(completed),
         config.mode == BenchMode::kCps ? "connections"
         : stream                       ? "messages"
                                        : "calls",
         config.run_seconds, reqs_per_sec);
  printf("  payload bytes: %.3f GB/s (%s)\n", bytes_per_sec / 1e9,
         stream ? "one way" : "requests + responses");
  printf("  latency (us): p50 %.2f  p99 %.2f  p99.9 %.2f\n", p50, p99, p999);
  printf(
      "  process CPU in the window: user %.3f s, sys %.3f s (%.2f cores), %.2f us and %.3f "
      "context switches per %s; peak RSS %ld kB\n",
      user_s, sys_s, (user_s + sys_s) / config.run_seconds, (user_s + sys_s) * 1e6 / n,
      context_switches / n, config.mode == BenchMode::kCps ? "connection" : "call", rss_kb);
  printf(
      "RESULT impl=%s mode=%s transport=tcp payload=%zu conc=%d reqs_per_sec=%.1f p50_us=%.2f "
      "p99_us=%.2f p999_us=%.2f user_cpu_s=%.3f sys_cpu_s=%.3f rss_kb=%ld cpu_us_per_req=%.3f "
      "cs_per_req=%.4f bytes_per_sec=%.0f",
      impl, ModeName(config.mode), config.payload_bytes - config.sidecar_bytes, conc, reqs_per_sec,
      p50, p99, p999, user_s, sys_s, rss_kb, (user_s + sys_s) * 1e6 / n, context_switches / n,
      bytes_per_sec);
  if (stream) printf(" msgs_per_sec=%.1f", reqs_per_sec);
  printf("\n");
  fflush(stdout);
  return 0;
}

}  // namespace bench
}  // namespace rrpc
