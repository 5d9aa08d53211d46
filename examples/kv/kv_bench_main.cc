// kv-bench: throughput and latency of kv-server for small puts or gets, from `conc` client
// threads each making one synchronous call at a time for `duration_s`. Starts its own KvServer in
// a temporary directory unless --server names one. Prints rpc-bench's RESULT line with impl=kv.
//
//   kv-bench --mode=put --payload=100 --conc=4 --duration_s=5
//
// --mode=scan loads --keys pairs through a Load stream, then reads them all, alternately with
// ScanStream and by paging the unary Scan, --rounds times each, and prints one RESULT line per
// way (rows/s as reqs_per_sec, bytes_per_sec, both the mean over rounds) and their ratio.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_client.h"
#include "kv/kv_server.h"
#include "rrpc/rpc/connection_info.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/messenger_flags.h"
#include "rrpc/rpc/rdma_flags.h"
#include "rrpc/util/command_line.h"

DEFINE_string(mode, "put",
              "put, get (gets read keys written before the timed run) or scan (ScanStream vs "
              "paged Scan over --keys pairs of --payload bytes).");
DEFINE_int32(stream_window, 1 << 20,
             "--mode=scan: bytes a scan stream may run ahead of the reader (the client's "
             "receive window; the in-process server's Load window too).");
DEFINE_int32(rounds, 6, "--mode=scan: full scans of each way, alternating.");
DEFINE_int32(payload, 100, "Value size in bytes.");
DEFINE_int32(conc, 4, "Client threads, each with one call in flight.");
DEFINE_double(duration_s, 5, "Seconds of the timed run.");
DEFINE_int32(keys, 10000, "Distinct keys written and read.");
DEFINE_string(server, "",
              "host:port of a running kv-server, or a cluster target of several (list://, "
              "file://, dns:///, etcd://; each key's calls go to one server of it); empty: start "
              "one in-process.");
DEFINE_int32(server_workers, 4, "Worker threads of the in-process server.");

namespace {

double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return static_cast<double>(sorted[i]);
}

std::string KeyOf(int i) {
  char buf[32];
  snprintf(buf, sizeof(buf), "key%08d", i);
  return buf;
}

long RssKb() {
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0, rss = 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

// Reads every pair once with ScanStream (stream) or by paging Scan; returns the bytes read.
rrpc::Result<uint64_t> ScanAll(rrpc::kv::KvClient* client, bool stream) {
  uint64_t bytes = 0;
  if (stream) {
    RRPC_RETURN_NOT_OK(client->ScanStream("", "", 0, [&](std::string_view k, std::string_view v) {
      bytes += k.size() + v.size();
      return true;
    }));
    return bytes;
  }
  std::string next;
  std::vector<std::pair<std::string, std::string>> pairs;
  while (true) {
    bool has_more = false;
    RRPC_RETURN_NOT_OK(client->Scan(next, "", 0, &pairs, &has_more));
    for (const auto& [k, v] : pairs) bytes += k.size() + v.size();
    if (!has_more || pairs.empty()) return bytes;
    next = pairs.back().first;
    next.push_back('\0');
  }
}

struct Stats {
  double mean = 0;
  double var = 0;  // sample variance
};
Stats StatsOf(const std::vector<double>& xs) {
  Stats st;
  for (double x : xs) st.mean += x / xs.size();
  for (double x : xs) st.var += (x - st.mean) * (x - st.mean) / std::max<size_t>(1, xs.size() - 1);
  return st;
}

int RunScan(rrpc::kv::KvClient* client) {
  int i = 0;
  const std::string value(static_cast<size_t>(FLAGS_payload), 'v');
  rrpc::Status s = client->Load([&](std::string* k, std::string* v) {
    if (i == FLAGS_keys) return false;
    *k = KeyOf(i++);
    *v = value;
    return true;
  });
  if (!s.ok()) {
    fprintf(stderr, "kv-bench: load: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<double> rate[2];  // bytes/s: [0] stream, [1] paged
  for (int r = 0; r < FLAGS_rounds; r++) {
    for (int way = 0; way < 2; way++) {
      const rrpc::MonoTime t0 = rrpc::MonoTime::Now();
      rrpc::Result<uint64_t> bytes = ScanAll(client, way == 0);
      if (!bytes.ok()) {
        fprintf(stderr, "kv-bench: scan: %s\n", bytes.status().ToString().c_str());
        return 1;
      }
      rate[way].push_back(*bytes / (rrpc::MonoTime::Now() - t0).ToSeconds());
    }
  }
  const double pair_bytes = KeyOf(0).size() + FLAGS_payload;
  for (int way = 0; way < 2; way++) {
    const Stats st = StatsOf(rate[way]);
    printf(
        "RESULT impl=kv mode=%s transport=tcp payload=%d conc=1 rows=%d rounds=%d "
        "reqs_per_sec=%.1f bytes_per_sec=%.0f bytes_per_sec_sd=%.0f rss_kb=%ld\n",
        way == 0 ? "scan_stream" : "scan_paged", FLAGS_payload, FLAGS_keys, FLAGS_rounds,
        st.mean / pair_bytes, st.mean, std::sqrt(st.var), RssKb());
  }
  const Stats a = StatsOf(rate[0]);
  const Stats b = StatsOf(rate[1]);
  const double se = std::sqrt(a.var / rate[0].size() + b.var / rate[1].size());
  printf("stream/paged: %.2fx; difference %.0f bytes/s, Welch t=%.1f\n", a.mean / b.mean,
         a.mean - b.mean, se > 0 ? (a.mean - b.mean) / se : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"kv-bench [--mode=put|get|scan] [--payload=BYTES] [--conc=N] [--duration_s=S] "
       "[--server=H:P|TARGET]",
       "Throughput and latency of kv-server for small puts or gets; starts its own server unless "
       "--server names one. Prints rpc-bench's RESULT line with impl=kv.",
       {"kv/kv_bench_main.cc", "rpc/security_flags.cc", "rpc/rdma/rdma_flags.cc"}});
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_mode != "put" && FLAGS_mode != "get" && FLAGS_mode != "scan") {
    fprintf(stderr, "--mode must be put, get or scan\n");
    return 2;
  }
  // --rdma: the client's connections (and those of the server it starts) upgrade to RDMA.
  auto rdma = rrpc::rdma::RdmaOptionsIfEnabledFromFlags();
  if (!rdma.ok()) {
    fprintf(stderr, "kv-bench: %s\n", rdma.status().message().c_str());
    return 2;
  }
  std::unique_ptr<rrpc::kv::KvServer> server;
  std::string data_dir;
  std::string server_name = FLAGS_server;
  if (FLAGS_server.empty()) {
    char tmpl[] = "/tmp/kv-bench-XXXXXX";
    CHECK(mkdtemp(tmpl) != nullptr);
    data_dir = tmpl;
    rrpc::kv::KvServerOptions opts;
    opts.base.name = "kv-bench-server";
    opts.base.data_dir = data_dir;
    opts.base.messenger.num_workers = FLAGS_server_workers;
    opts.base.messenger.stream_window = static_cast<size_t>(FLAGS_stream_window);
    opts.base.messenger.security = rrpc::rpc::SecurityOptionsFromFlags();
    opts.base.rdma = rdma.value();
    server = std::make_unique<rrpc::kv::KvServer>(opts);
    RRPC_CHECK_OK(server->Start());
    server_name = server->rpc_address().ToString();
  }
  rrpc::rpc::MessengerBuilder builder("kv-bench");
  builder.mutable_options()->security = rrpc::rpc::SecurityOptionsFromFlags();
  RRPC_CHECK_OK(rrpc::rdma::UseRdmaFromFlags("kv-bench", builder.mutable_options()));
  auto messenger = builder.Build();
  RRPC_CHECK_OK(messenger.status());
  rrpc::kv::KvClientOptions client_opts;
  client_opts.stream_receive_window = static_cast<size_t>(FLAGS_stream_window);
  auto connected = rrpc::kv::KvClient::Connect(*messenger, server_name, client_opts);
  if (!connected.ok()) {
    fprintf(stderr, "kv-bench: %s\n", connected.status().ToString().c_str());
    return 2;
  }
  rrpc::kv::KvClient& client = **connected;
  if (FLAGS_mode == "scan") {
    const int rc = RunScan(&client);
    (*messenger)->Shutdown();
    if (server) server->Shutdown();
    if (!data_dir.empty()) std::filesystem::remove_all(data_dir);
    return rc;
  }
  const std::string value(static_cast<size_t>(FLAGS_payload), 'v');
  if (FLAGS_mode == "get") {
    for (int i = 0; i < FLAGS_keys; i++) RRPC_CHECK_OK(client.Put(KeyOf(i), value));
  }

  struct rusage ru0;
  getrusage(RUSAGE_SELF, &ru0);
  std::atomic<bool> failed{false};
  std::vector<std::vector<int64_t>> latencies(FLAGS_conc);
  const rrpc::MonoTime start = rrpc::MonoTime::Now();
  const rrpc::MonoTime end = start + rrpc::MonoDelta::FromSeconds(FLAGS_duration_s);
  std::vector<std::thread> threads;
  for (int t = 0; t < FLAGS_conc; t++) {
    threads.emplace_back([&, t] {
      std::string got;
      auto& lat = latencies[t];
      lat.reserve(1 << 16);
      for (int n = 0;; n++) {
        const rrpc::MonoTime t0 = rrpc::MonoTime::Now();
        if (t0 >= end) break;
        const std::string key = KeyOf((n * FLAGS_conc + t) % FLAGS_keys);
        rrpc::Status s = FLAGS_mode == "put" ? client.Put(key, value) : client.Get(key, &got);
        if (!s.ok()) {
          LOG(ERROR) << s.ToString();
          failed.store(true);
          break;
        }
        lat.push_back((rrpc::MonoTime::Now() - t0).ToMicroseconds());
      }
    });
  }
  for (auto& th : threads) th.join();
  const double elapsed = (rrpc::MonoTime::Now() - start).ToSeconds();
  struct rusage ru1;
  getrusage(RUSAGE_SELF, &ru1);
  std::vector<int64_t> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  auto secs = [](const timeval& a, const timeval& b) {
    return static_cast<double>(b.tv_sec - a.tv_sec) + (b.tv_usec - a.tv_usec) / 1e6;
  };
  // What the calls went over: the transport of the client's connections ("rdma" once upgraded).
  std::string transport = "none";
  for (const rrpc::rpc::ConnectionInfo& c : (*messenger)->DumpConnections()) {
    transport = transport == "none" || transport == c.transport ? c.transport : "mixed";
  }
  printf(
      "RESULT impl=kv mode=%s transport=%s payload=%d conc=%d reqs_per_sec=%.1f p50_us=%.1f "
      "p99_us=%.1f p999_us=%.1f user_cpu_s=%.2f sys_cpu_s=%.2f rss_kb=%ld\n",
      FLAGS_mode.c_str(), transport.c_str(), FLAGS_payload, FLAGS_conc, all.size() / elapsed,
      Percentile(all, 0.50), Percentile(all, 0.99), Percentile(all, 0.999),
      secs(ru0.ru_utime, ru1.ru_utime), secs(ru0.ru_stime, ru1.ru_stime), RssKb());
  (*messenger)->Shutdown();
  if (server) server->Shutdown();
  if (!data_dir.empty()) std::filesystem::remove_all(data_dir);
  return failed.load() ? 1 : 0;
}
