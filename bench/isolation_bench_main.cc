// isolation-bench: do foreground reads stay fast while background work floods the server? One
// process, server and client on loopback. Handlers sleep (a storage call waiting on its disk:
// workers, not the CPU, set the capacity): Get --get_us, Scan --scan_us. For each mode:
//   off:      one shared pool, Scan foreground like Get (rrpc without this feature);
//   priority: one shared pool, Scan background (option (rrpc.background) in the .proto);
//   pools:    Scan in a pool of its own with half the workers, Get in the default pool with the
//             other half;
// two phases of --seconds each:
//   alone:  --get_conc Gets (64 bytes) in a closed loop;
//   loaded: the same, while an open loop offers Scans at --background_x times the server's scan
//           capacity (all workers / scan_us), each with a --scan_deadline_ms budget.
// Prints per mode and phase:
//   ISOLATION mode=<m> phase=<alone|loaded> gets_per_sec=<f> get_p50_us=<f> get_p99_us=<f>
//     get_errors=<n> scans_ok=<n> scans_refused=<n>
// and per mode: ISOLATION mode=<m> summary p99_vs_alone=<f> throughput_vs_alone=<f>
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/isolation_bench.rrpc.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/command_line.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "util/countdown_latch.h"

DEFINE_int32(workers, 4, "Server worker threads in all (the pools mode splits them in two)");
DEFINE_int32(queue_length, 64, "Queue length of each pool (per priority class)");
DEFINE_int32(get_us, 200, "Time each Get handler takes (sleeping), microseconds");
DEFINE_int32(scan_us, 10000, "Time each Scan handler takes (sleeping), microseconds");
DEFINE_int32(get_conc, 2, "Gets outstanding at once (closed loop)");
DEFINE_double(background_x, 10.0, "Scans offered, as a multiple of the server's scan capacity");
DEFINE_int32(scan_deadline_ms, 1000, "Each Scan's budget");
DEFINE_double(seconds, 3.0, "Length of each phase");
DEFINE_string(modes, "off,priority,pools", "Modes to run, in this order");

namespace rrpc::bench {
namespace {

class SleepyService final : public IsolationBenchServiceIf {
 public:
  void Get(const IsoRequestPB* req, IsoResponsePB* resp, rpc::RpcContext* ctx) override {
    SleepFor(MonoDelta::FromMicroseconds(FLAGS_get_us));
    resp->set_payload(req->payload());
    ctx->RespondSuccess();
  }
  void Scan(const IsoRequestPB* req, IsoResponsePB* resp, rpc::RpcContext* ctx) override {
    SleepFor(MonoDelta::FromMicroseconds(FLAGS_scan_us));
    resp->set_payload(req->payload());
    ctx->RespondSuccess();
  }
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(v.size() * q))];
}

struct GetResult {
  double per_sec = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t errors = 0;
};

// `conc` threads each calling Get synchronously for `seconds`.
GetResult RunGets(const IsolationBenchServiceProxy& proxy, double seconds) {
  Mutex mu;
  std::vector<double> latencies_us;
  std::atomic<int64_t> errors{0};
  const MonoTime end = MonoTime::Now() + MonoDelta::FromSeconds(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < FLAGS_get_conc; t++) {
    threads.emplace_back([&] {
      IsoRequestPB req;
      req.set_payload(std::string(64, 'g'));
      std::vector<double> mine;
      while (MonoTime::Now() < end) {
        IsoResponsePB resp;
        rpc::RpcController ctl;
        ctl.set_timeout(MonoDelta::FromSeconds(10));
        const MonoTime start = MonoTime::Now();
        if (proxy.Get(req, &resp, &ctl).ok()) {
          mine.push_back((MonoTime::Now() - start).ToSeconds() * 1e6);
        } else {
          errors++;
        }
      }
      MutexLock l(mu);
      latencies_us.insert(latencies_us.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  GetResult r;
  r.per_sec = latencies_us.size() / seconds;
  r.p50_us = Percentile(latencies_us, 0.5);
  r.p99_us = Percentile(latencies_us, 0.99);
  r.errors = errors.load();
  return r;
}

struct ScanCall {
  IsoRequestPB req;
  IsoResponsePB resp;
  rpc::RpcController ctl;
};

// Offers Scans at `rate` per second until `stop`; counts answers and refusals.
void RunScans(const IsolationBenchServiceProxy& proxy, double rate, const std::atomic<bool>* stop,
              std::atomic<int64_t>* ok, std::atomic<int64_t>* refused) {
  std::atomic<int64_t> in_flight{0};
  const MonoTime start = MonoTime::Now();
  for (int64_t i = 0; !stop->load(); i++) {
    const MonoTime due = start + MonoDelta::FromSeconds(i / rate);
    const MonoTime now = MonoTime::Now();
    if (due > now) SleepFor(due - now);
    auto* c = new ScanCall;
    c->req.set_payload("scan");
    c->ctl.set_timeout(MonoDelta::FromMilliseconds(FLAGS_scan_deadline_ms));
    in_flight++;
    proxy.ScanAsync(c->req, &c->resp, &c->ctl, [c, ok, refused, &in_flight] {
      if (c->ctl.status().ok()) {
        (*ok)++;
      } else {
        (*refused)++;
      }
      delete c;
      in_flight--;
    });
  }
  while (in_flight.load() > 0) SleepFor(MonoDelta::FromMilliseconds(5));
}

void Print(const std::string& mode, const char* phase, const GetResult& g, int64_t scans_ok,
           int64_t scans_refused) {
  printf(
      "ISOLATION mode=%s phase=%s gets_per_sec=%.0f get_p50_us=%.0f get_p99_us=%.0f "
      "get_errors=%lld scans_ok=%lld scans_refused=%lld\n",
      mode.c_str(), phase, g.per_sec, g.p50_us, g.p99_us, static_cast<long long>(g.errors),
      static_cast<long long>(scans_ok), static_cast<long long>(scans_refused));
  fflush(stdout);
}

void RunMode(const std::string& mode) {
  rpc::MessengerOptions options;
  options.name = "isolation-server-" + mode;
  options.num_workers = FLAGS_workers;
  options.service_queue_length = FLAGS_queue_length;
  if (mode == "pools") {
    options.num_workers = std::max(1, FLAGS_workers / 2);
    rpc::ServicePoolConfig bulk;
    bulk.name = "bulk";
    bulk.num_workers = std::max(1, FLAGS_workers - options.num_workers);
    bulk.queue_length = FLAGS_queue_length;
    options.service_pools.push_back(bulk);
  }
  std::shared_ptr<rpc::Messenger> server = rpc::MessengerBuilder(options).Build().value();
  auto service = std::make_unique<SleepyService>();
  if (mode == "off") {
    RRPC_CHECK_OK(service->SetPriority("Scan", rpc::CallPriority::kForeground));
  } else if (mode == "pools") {
    RRPC_CHECK_OK(service->SetMethodPool("Scan", "bulk"));
  }
  RRPC_CHECK_OK(server->RegisterService(std::move(service)));
  Sockaddr addr;
  RRPC_CHECK_OK(server->Listen(Sockaddr::Loopback(0), &addr));
  std::shared_ptr<rpc::Messenger> client =
      rpc::MessengerBuilder("isolation-client-" + mode).Build().value();
  IsolationBenchServiceProxy proxy(client, addr);

  const GetResult alone = RunGets(proxy, FLAGS_seconds);
  Print(mode, "alone", alone, 0, 0);

  const double rate = FLAGS_background_x * FLAGS_workers * 1e6 / FLAGS_scan_us;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> scans_ok{0}, scans_refused{0};
  std::thread scans([&] { RunScans(proxy, rate, &stop, &scans_ok, &scans_refused); });
  SleepFor(MonoDelta::FromMilliseconds(200));  // the flood reaches its steady state
  const GetResult loaded = RunGets(proxy, FLAGS_seconds);
  stop = true;
  scans.join();
  Print(mode, "loaded", loaded, scans_ok.load(), scans_refused.load());
  printf("ISOLATION mode=%s summary p99_vs_alone=%.2f throughput_vs_alone=%.2f\n", mode.c_str(),
         alone.p99_us > 0 ? loaded.p99_us / alone.p99_us : 0.0,
         alone.per_sec > 0 ? loaded.per_sec / alone.per_sec : 0.0);
  fflush(stdout);
  client->Shutdown();
  server->Shutdown();
}

int Main() {
  std::string modes = FLAGS_modes;
  size_t pos = 0;
  while (pos <= modes.size()) {
    const size_t comma = std::min(modes.find(',', pos), modes.size());
    const std::string mode = modes.substr(pos, comma - pos);
    if (mode != "off" && mode != "priority" && mode != "pools") {
      fprintf(stderr, "isolation-bench: unknown mode '%s' (off, priority, pools)\n", mode.c_str());
      return 2;
    }
    RunMode(mode);
    pos = comma + 1;
  }
  return 0;
}

}  // namespace
}  // namespace rrpc::bench

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"isolation-bench [--modes=off,priority,pools] [--background_x=X] [--seconds=S]",
       "Foreground Gets alone and beside a background Scan flood, with service pools and "
       "priorities off and on (docs/isolation.md).",
       {"bench/isolation_bench_main.cc"}});
  google::InitGoogleLogging(argv[0]);
  return rrpc::bench::Main();
}
