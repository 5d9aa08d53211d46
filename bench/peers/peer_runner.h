// The part every benchmark peer shares: rpc-bench's flags, the measurement window, the run itself
// (in-process or external server, client threads, CPU and RSS sampling) and the RESULT line. A
// peer supplies only a server factory and a client thread body:
//
//   int main(int argc, char** argv) {
//     rrpc::ParseCommandLine(&argc, &argv, {"my-peer [flags]", "What it is.",
//                                           {"bench/peers/peer_runner.cc"}});
//     return RunPeerMain("raw-tcp", &StartMyServer, &RunMyClientThread);
//   }
//
// Everything here runs on the main thread except MeasureWindow/ClientStats, which client threads
// use (each its own ClientStats), and Fail(), which any thread may call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "bench/peers/latency_histogram.h"

namespace rrpc {
namespace bench {

using Clock = std::chrono::steady_clock;

// kStream: each client thread reads one stream of payload_bytes messages from the server
// (one way); reqs_per_sec counts messages, bytes_per_sec their payload one way.
enum class BenchMode { kLatency, kThroughput, kCps, kStream };

// The peers' configuration, read from the shared flags (see peer_runner.cc for their help).
struct PeerConfig {
  BenchMode mode = BenchMode::kThroughput;
  double run_seconds = 5;
  double warmup_seconds = 1;
  size_t payload_bytes = 64;
  size_t response_bytes = 64;       // what clients expect
  long server_response_bytes = -1;  // what servers send; -1 echoes each request's size
  // rpc-bench's --sidecar_bytes, for a ratio on the same bytes: a peer has no sidecars, so they
  // are already added to payload_bytes and response_bytes (request and response each carry them).
  size_t sidecar_bytes = 0;
  int client_threads = 1;
  int async_call_concurrency = 64;
  int server_threads = 2;
  int server_workers = 0;   // raw-tcp: worker threads answering the loops' frames; 0 = none
  std::string server_addr;  // host:port; empty runs the server in-process
  bool server_only = false;
  std::string bind_host = "127.0.0.1";
  int port = 0;  // 0 = ephemeral
  bool corrupt_responses_for_test = false;

  // Outstanding calls per client thread: 1 in latency, cps and stream mode.
  int Depth() const { return mode == BenchMode::kThroughput ? async_call_concurrency : 1; }
  // Latency mode always runs one client thread: one connection, one call at a time.
  int ClientThreads() const { return mode == BenchMode::kLatency ? 1 : client_threads; }
};

// Reads and validates the flags. False with a message on a bad value.
bool PeerConfigFromFlags(PeerConfig* config, std::string* error);

const char* ModeName(BenchMode mode);

// The interval whose completions count: [start, end).
struct MeasureWindow {
  Clock::time_point start;
  Clock::time_point end;
  bool Contains(Clock::time_point t) const { return t >= start && t < end; }
};

// What one client thread measured inside the window. cps mode counts connections.
struct ClientStats {
  uint64_t completed = 0;
  LatencyHistogram latency;

  void Record(Clock::time_point issued, Clock::time_point done, const MeasureWindow& window) {
    if (!window.Contains(done)) return;
    ++completed;
    latency.Record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(done - issued).count()));
  }
};

// A running echo server. Shutdown() stops it and joins its threads; it is called once, from the
// main thread.
class PeerServer {
 public:
  virtual ~PeerServer() = default;
  virtual int port() const = 0;
  virtual void Shutdown() = 0;
};

// Starts a server on config.bind_host:config.port (port 0: ephemeral). Null with a message on
// failure.
using ServerFactory =
    std::function<std::unique_ptr<PeerServer>(const PeerConfig& config, std::string* error)>;

// What a client thread gets: its index, the server's host:port, the window, its own stats.
struct ClientThreadArgs {
  int index = 0;
  std::string server_addr;
  const MeasureWindow* window = nullptr;
  ClientStats* stats = nullptr;
};

// Runs one client thread's whole share of the benchmark in config.mode, stopping new work at
// window.end and draining what is outstanding. Fails the process (Fail()) on any error or wrong
// response.
using ClientThreadFn = std::function<void(const PeerConfig& config, const ClientThreadArgs& args)>;

// Runs the peer as the flags say and prints the summary and the RESULT line. Returns the exit
// code.
int RunPeerMain(const char* impl, const ServerFactory& start_server,
                const ClientThreadFn& run_client);

// Prints "FATAL: <message>" to stderr and ends the process with exit code 1 at once (other threads
// may still be running, so no destructors run). Any thread may call it.
[[noreturn]] void Fail(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Splits "host:port". False if malformed.
bool SplitHostPort(const std::string& host_port, std::string* host, int* port);

}  // namespace bench
}  // namespace rrpc
