// kv-cluster-bench: the timed figures of kv reads while one of three kv-server processes is
// SIGKILLed (docs/cluster.md, "Cluster scenarios: timed figures"). It starts three kv-servers
// on 127.0.0.1 (each key written to all three: they are replicas), then --clients client
// messengers, each with a channel over the three through a list:// target and --concurrency Gets
// in flight (every value checked), for --steady_seconds; then SIGKILLs one server and measures
// --after_seconds more. Prints cluster-bench's kill figures (p99 before and after, throughput per
// 100 ms against the steady rate, retries against the budget) as one "CLUSTER scenario=kv_kill"
// line. Exit 0 when no read failed. It signals and reaps only the servers it started (the other
// two get SIGTERM, then SIGKILL after 10 s); their data goes with its temporary directory.
//
//   kv-cluster-bench --steady_seconds=5 --after_seconds=10
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/closed_loop.h"
#include "bench/cluster_bench_recorder.h"
#include "kv/kv.rrpc.h"
#include "kv/kv_server_process.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/command_line.h"
#include "util/countdown_latch.h"

DEFINE_int32(clients, 2, "Client messengers, each with its own channel over the three servers");
DEFINE_int32(concurrency, 64, "Gets in flight per client");
DEFINE_double(steady_seconds, 5, "Seconds of reads before the kill (the first is warm-up)");
DEFINE_double(after_seconds, 10, "Seconds of reads measured after the kill");
DEFINE_int32(keys, 1000, "Keys written to every server before the run, then read");
DEFINE_int32(value_bytes, 100, "Bytes per value");
DEFINE_string(server_binary, "", "The kv-server binary; empty: the one next to this binary");

namespace rrpc::kv {
namespace {

using bench::Ms;
using bench::Recorder;

std::string KeyOf(int i) {
  char buf[32];
  snprintf(buf, sizeof(buf), "key%08d", i);
  return buf;
}

// One slot's Get of the prewritten keys (bench/closed_loop.h): slot i reads keys i*131, i*131+1,
// ... (modulo --keys); a read that fails, finds nothing or returns another value is a failure.
struct GetCall {
  using Proxy = KvServiceProxy;
  GetCall(Proxy* p, int index) : proxy(p), first_key(index * 131) {}
  template <typename F>
  void Send(F done) {
    req.set_key(KeyOf((first_key + n++) % FLAGS_keys));
    proxy->GetAsync(req, &resp, &ctl, std::move(done));
  }
  std::string Failure() const {
    if (!ctl.status().ok()) return ctl.status().ToString();
    return resp.found() && resp.value() == *expected_value ? std::string() : "wrong value";
  }
  static const std::string* expected_value;  // every key's value, set before the loads start
  Proxy* const proxy;
  const int first_key;
  int n = 0;
  GetRequestPB req;
  GetResponsePB resp;
  rpc::RpcController ctl;
};
const std::string* GetCall::expected_value = nullptr;

using ReadLoad = bench::ClosedLoop<GetCall>;

Status Prewrite(const std::shared_ptr<rpc::Messenger>& messenger, const Sockaddr& addr,
                const std::string& value) {
  KvServiceProxy proxy(messenger, addr);
  for (int i = 0; i < FLAGS_keys; i++) {
    PutRequestPB req;
    req.set_key(KeyOf(i));
    req.set_value(value);
    PutResponsePB resp;
    rpc::RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(10));
    RRPC_RETURN_NOT_OK(proxy.Put(req, &resp, &ctl));
  }
  return Status::OK();
}

int Run(const std::string& self_dir, const std::string& dir) {
  const std::string binary =
      FLAGS_server_binary.empty() ? self_dir + "/kv-server" : FLAGS_server_binary;
  const std::string value(static_cast<size_t>(FLAGS_value_bytes), 'v');
  GetCall::expected_value = &value;
  auto setup = rpc::MessengerBuilder("prewrite").Build().value();
  std::vector<std::unique_ptr<KvServerProcess>> servers;
  std::string target = "list://";
  for (int i = 0; i < 3; i++) {
    const std::string server_dir = dir + "/server" + std::to_string(i);
    std::filesystem::create_directories(server_dir);
    // One server's queue holds every call of the clients while the others are gone.
    servers.push_back(std::make_unique<KvServerProcess>(
        binary, server_dir,
        std::vector<std::string>{
            "--rpc_service_queue_length=" +
            std::to_string(std::max(64, 2 * FLAGS_clients * FLAGS_concurrency))}));
    Status s = servers.back()->Start();
    if (s.ok()) s = Prewrite(setup, servers.back()->addr(), value);
    if (!s.ok()) {
      fprintf(stderr, "kv-cluster-bench: server %d: %s\n", i, s.ToString().c_str());
      return 2;
    }
    target += (i > 0 ? "," : "") + servers.back()->addr().ToString();
  }
  setup->Shutdown();

  const double total = FLAGS_steady_seconds + FLAGS_after_seconds;
  Recorder recorder(static_cast<size_t>(total * 400'000));
  std::vector<std::shared_ptr<rpc::Messenger>> messengers;
  std::vector<std::unique_ptr<ReadLoad>> loads;
  for (int i = 0; i < FLAGS_clients; i++) {
    rpc::MessengerOptions mo;
    mo.name = "client" + std::to_string(i);
    messengers.push_back(rpc::MessengerBuilder(mo).Build().value());
    rpc::ChannelOptions co;
    co.name = "kvbench" + std::to_string(i);
    auto channel = rpc::Channel::Create(messengers.back(), target, co);
    CHECK(channel.ok()) << channel.status().ToString();
    loads.push_back(
        std::make_unique<ReadLoad>(*channel, FLAGS_concurrency, &recorder, "kv-cluster-bench"));
  }
  for (auto& l : loads) l->Start();
  SleepFor(MonoDelta::FromSeconds(FLAGS_steady_seconds));
  const double kill_at = recorder.Elapsed();
  const int killed = servers[1]->Signal(SIGKILL);
  SleepFor(MonoDelta::FromSeconds(FLAGS_after_seconds));
  const double end = recorder.Elapsed();
  for (auto& l : loads) l->Stop();
  for (auto& m : messengers) m->Shutdown();
  for (size_t i = 0; i < servers.size(); i++) {
    if (i != 1) servers[i]->Stop(MonoDelta::FromSeconds(10));
  }

  int64_t calls = 0, failed = 0, retries = 0, budget = 0, refused = 0;
  for (const auto& l : loads) {
    calls += l->calls();
    failed += l->failed();
    retries += l->extra_attempts();
    const auto& rb = l->channel()->options().retry_budget;
    budget += rb.max_tokens + static_cast<int64_t>(rb.ratio * l->calls()) +
              static_cast<int64_t>(rb.floor_per_second * (end + 1));
    refused += l->channel()->retries_refused();
  }
  const bench::LossFigures f = bench::FiguresOfLoss(recorder, kill_at, end, FLAGS_after_seconds);
  printf(
      "CLUSTER scenario=kv_kill clients=%d concurrency=%d keys=%d calls=%ld failed=%ld "
      "killed_exit=%d steady_per_sec=%.0f steady_p50_ms=%.2f steady_p99_ms=%.2f "
      "after_kill_p99_ms=%.2f after_kill_p999_ms=%.2f after_kill_max_ms=%.2f p99_ratio=%.2f "
      "lowest_100ms_share=%.2f back_to_60pct_s=%.1f last_below_60pct_s=%.1f retries=%ld "
      "retry_budget=%ld retries_refused=%ld\n",
      FLAGS_clients, FLAGS_concurrency, FLAGS_keys, calls, failed, killed, f.steady_per_sec,
      Ms(f.steady.ValueAtPercentile(50)), Ms(f.steady.ValueAtPercentile(99)),
      Ms(f.after.ValueAtPercentile(99)), Ms(f.after.ValueAtPercentile(99.9)), Ms(f.after.max()),
      double(f.after.ValueAtPercentile(99)) / std::max<uint64_t>(1, f.steady.ValueAtPercentile(99)),
      f.lowest_share, f.back_to_60pct_s, f.last_below_60pct_s, retries, budget, refused);
  printf("CLUSTER scenario=kv_kill per_second_after_kill=");
  bench::PrintCounts(f.per_second_after);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rrpc::kv

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"kv-cluster-bench [--clients=N] [--concurrency=N] [--steady_seconds=S] "
       "[--after_seconds=S]",
       "Reads from three kv-server processes through a list:// cluster channel while one is "
       "SIGKILLed: failed reads, p99 before and after, time back to 60% throughput "
       "(docs/cluster.md).",
       {"kv/kv_cluster_bench_main.cc"}});
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_clients < 1 || FLAGS_concurrency < 1 || FLAGS_keys < 1 || FLAGS_steady_seconds <= 1 ||
      FLAGS_after_seconds <= 0) {
    fprintf(stderr,
            "kv-cluster-bench: --clients, --concurrency, --keys and --after_seconds must be "
            "positive, --steady_seconds above 1\n");
    return 2;
  }
  const std::string self_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  char tmpl[] = "/tmp/kv-cluster-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    perror("kv-cluster-bench: mkdtemp");
    return 2;
  }
  const int rc = rrpc::kv::Run(self_dir, tmpl);
  std::filesystem::remove_all(tmpl);
  return rc;
}
