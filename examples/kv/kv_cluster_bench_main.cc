// kv-cluster-bench: the timed figures of kv reads through a cluster channel over three kv-server
// processes on 127.0.0.1 (docs/cluster.md, "Cluster scenarios: timed figures"), while one of
// them is lost (--scenario=kill: SIGKILLed) or overloaded (--scenario=overload: flooded with
// --flood_concurrency Gets of its own, not through the channel). Each key is written to all
// three (they are replicas); --clients client messengers, each with a channel over the three
// through a list:// target, keep --concurrency Gets in flight (every value checked) for
// --steady_seconds, then the server is lost or flooded for --after_seconds more.
//
// kill prints cluster-bench's kill figures (p99 before and after, throughput per 100 ms against
// the steady rate, retries against the budget) as one "CLUSTER scenario=kv_kill" line. overload
// starts every server with --rpc_adaptive_limit (unless --adaptive_limit=false) and prints the
// flooded server's share of the channels' attempts per 100 ms, and when it fell below half its
// steady share, as "CLUSTER scenario=kv_overload". Exit 0 when no channel read failed. It signals
// and reaps only the servers it started (SIGTERM, then SIGKILL after 10 s); their data goes with
// its temporary directory.
//
//   kv-cluster-bench --steady_seconds=5 --after_seconds=10
//   kv-cluster-bench --scenario=overload --steady_seconds=3 --after_seconds=5
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
#include <thread>
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
DEFINE_double(steady_seconds, 5,
              "Seconds of reads before the kill or flood (the first is warm-up)");
DEFINE_double(after_seconds, 10, "Seconds of reads measured after the kill, or of the flood");
DEFINE_int32(keys, 1000, "Keys written to every server before the run, then read");
DEFINE_int32(value_bytes, 100, "Bytes per value");
DEFINE_string(server_binary, "", "The kv-server binary; empty: the one next to this binary");
DEFINE_string(scenario, "kill", "kill: SIGKILL one server; overload: flood one server with Gets");
DEFINE_int32(flood_concurrency, 512,
             "overload: Gets in flight sent to the flooded server alone (a closed loop)");
DEFINE_bool(adaptive_limit, true, "overload: start the servers with --rpc_adaptive_limit");

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

// Where the flooded server's share of the channels' attempts stood, per 100 ms slot.
struct ShareSampler {
  MonoTime start;              // slot k covers [start + k * 100 ms, start + (k + 1) * 100 ms)
  std::vector<double> shares;  // the flooded server's attempts / all attempts in each slot
};

// The attempts `loads`' channels sent to `only`; `*all`: to every server.
int64_t AttemptsTo(const std::vector<std::unique_ptr<ReadLoad>>& loads, const Sockaddr& only,
                   int64_t* all) {
  int64_t to = 0;
  *all = 0;
  for (const auto& l : loads) {
    for (const rpc::BackendInfo& b : l->channel()->Backends()) {
      *all += b.calls;
      if (b.addr == only) to += b.calls;
    }
  }
  return to;
}

// Samples every 100 ms, until `stop`, the share of the attempts that went to `flooded`.
void SampleShares(const std::vector<std::unique_ptr<ReadLoad>>* loads, const Sockaddr& flooded,
                  const std::atomic<bool>* stop, ShareSampler* out) {
  int64_t last_all = 0;
  int64_t last_to = AttemptsTo(*loads, flooded, &last_all);
  MonoTime next = out->start;
  while (!stop->load()) {
    next = next + MonoDelta::FromMilliseconds(100);
    SleepFor(next - MonoTime::Now());
    int64_t all = 0;
    const int64_t to = AttemptsTo(*loads, flooded, &all);
    out->shares.push_back(all > last_all ? double(to - last_to) / double(all - last_all) : 0);
    last_all = all;
    last_to = to;
  }
}

struct Cluster {
  std::vector<std::unique_ptr<KvServerProcess>> servers;
  std::string target = "list://";
};

// Starts three kv-servers (with `extra_flags`) in `dir` and writes every key to each.
Status StartCluster(const std::string& binary, const std::string& dir, const std::string& value,
                    const std::vector<std::string>& extra_flags, Cluster* cluster) {
  auto setup = rpc::MessengerBuilder("prewrite").Build().value();
  for (int i = 0; i < 3; i++) {
    const std::string server_dir = dir + "/server" + std::to_string(i);
    std::filesystem::create_directories(server_dir);
    // One server's queue holds every call of the clients while the others are gone.
    std::vector<std::string> flags = {
        "--rpc_service_queue_length=" +
        std::to_string(std::max(64, 2 * FLAGS_clients * FLAGS_concurrency))};
    flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
    cluster->servers.push_back(std::make_unique<KvServerProcess>(binary, server_dir, flags));
    Status s = cluster->servers.back()->Start();
    if (s.ok()) s = Prewrite(setup, cluster->servers.back()->addr(), value);
    if (!s.ok()) return s.CloneAndPrepend("server " + std::to_string(i));
    cluster->target += (i > 0 ? "," : "") + cluster->servers.back()->addr().ToString();
  }
  setup->Shutdown();
  return Status::OK();
}

// --clients messengers with a channel each over `target`, --concurrency Gets in flight each.
struct Clients {
  std::vector<std::shared_ptr<rpc::Messenger>> messengers;
  std::vector<std::unique_ptr<ReadLoad>> loads;
  Clients(const std::string& target, Recorder* recorder) {
    for (int i = 0; i < FLAGS_clients; i++) {
      rpc::MessengerOptions mo;
      mo.name = "client" + std::to_string(i);
      messengers.push_back(rpc::MessengerBuilder(mo).Build().value());
      rpc::ChannelOptions co;
      co.name = "kvbench" + std::to_string(i);
      auto channel = rpc::Channel::Create(messengers.back(), target, co);
      CHECK(channel.ok()) << channel.status().ToString();
      loads.push_back(
          std::make_unique<ReadLoad>(*channel, FLAGS_concurrency, recorder, "kv-cluster-bench"));
    }
  }
  void Start() {
    for (auto& l : loads) l->Start();
  }
  void Stop() {
    for (auto& l : loads) l->Stop();
    for (auto& m : messengers) m->Shutdown();
  }
  int64_t calls() const {
    int64_t n = 0;
    for (const auto& l : loads) n += l->calls();
    return n;
  }
  int64_t failed() const {
    int64_t n = 0;
    for (const auto& l : loads) n += l->failed();
    return n;
  }
  int64_t retries() const {
    int64_t n = 0;
    for (const auto& l : loads) n += l->extra_attempts();
    return n;
  }
};

int RunKill(const std::string& binary, const std::string& dir, const std::string& value) {
  Cluster cluster;
  Status s = StartCluster(binary, dir, value, {}, &cluster);
  if (!s.ok()) {
    fprintf(stderr, "kv-cluster-bench: %s\n", s.ToString().c_str());
    return 2;
  }
  auto& servers = cluster.servers;
  const double total = FLAGS_steady_seconds + FLAGS_after_seconds;
  Recorder recorder(static_cast<size_t>(total * 400'000));
  Clients clients(cluster.target, &recorder);
  clients.Start();
  SleepFor(MonoDelta::FromSeconds(FLAGS_steady_seconds));
  const double kill_at = recorder.Elapsed();
  const int killed = servers[1]->Signal(SIGKILL);
  SleepFor(MonoDelta::FromSeconds(FLAGS_after_seconds));
  const double end = recorder.Elapsed();
  clients.Stop();
  for (size_t i = 0; i < servers.size(); i++) {
    if (i != 1) servers[i]->Stop(MonoDelta::FromSeconds(10));
  }

  int64_t budget = 0, refused = 0;
  for (const auto& l : clients.loads) {
    const auto& rb = l->channel()->options().retry_budget;
    budget += rb.max_tokens + static_cast<int64_t>(rb.ratio * l->calls()) +
              static_cast<int64_t>(rb.floor_per_second * (end + 1));
    refused += l->channel()->retries_refused();
  }
  const int64_t calls = clients.calls(), failed = clients.failed(), retries = clients.retries();
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

// One server of three flooded with Gets sent to it alone: the channels' share of attempts to it
// before and after, how soon it fell below half the steady share, and no channel read failing.
int RunOverload(const std::string& binary, const std::string& dir, const std::string& value) {
  Cluster cluster;
  std::vector<std::string> flags;
  if (FLAGS_adaptive_limit) flags.push_back("--rpc_adaptive_limit");
  Status s = StartCluster(binary, dir, value, flags, &cluster);
  if (!s.ok()) {
    fprintf(stderr, "kv-cluster-bench: %s\n", s.ToString().c_str());
    return 2;
  }
  const Sockaddr flooded = cluster.servers[1]->addr();
  const double total = FLAGS_steady_seconds + FLAGS_after_seconds;
  Recorder recorder(static_cast<size_t>(total * 400'000));
  Clients clients(cluster.target, &recorder);
  std::atomic<bool> stop_sampling{false};
  ShareSampler sampler;
  sampler.start = MonoTime::Now();
  clients.Start();
  std::thread sampling(SampleShares, &clients.loads, flooded, &stop_sampling, &sampler);
  SleepFor(MonoDelta::FromSeconds(FLAGS_steady_seconds));

  // The flood: its own messenger and a channel to the flooded server alone, so its refused
  // calls are not retried elsewhere.
  const size_t flood_slot = (MonoTime::Now() - sampler.start).ToMilliseconds() / 100;
  const double flood_at = recorder.Elapsed();
  rpc::MessengerOptions fo;
  fo.name = "flood";
  auto flood_messenger = rpc::MessengerBuilder(fo).Build().value();
  rpc::ChannelOptions fco;
  fco.name = "flood";
  auto flood_channel =
      rpc::Channel::Create(flood_messenger, "list://" + flooded.ToString(), std::move(fco));
  CHECK(flood_channel.ok()) << flood_channel.status().ToString();
  ReadLoad flood(*flood_channel, FLAGS_flood_concurrency, nullptr, "kv-cluster-bench flood");
  flood.Start();
  SleepFor(MonoDelta::FromSeconds(FLAGS_after_seconds));
  flood.Stop();
  flood_messenger->Shutdown();
  const double end = recorder.Elapsed();
  clients.Stop();
  stop_sampling.store(true);
  sampling.join();
  for (auto& server : cluster.servers) server->Stop(MonoDelta::FromSeconds(10));

  // The steady share: the slots after the first second (warm-up) and before the flood.
  double steady = 0;
  int steady_slots = 0;
  for (size_t i = 10; i < flood_slot && i < sampler.shares.size(); i++) {
    steady += sampler.shares[i];
    steady_slots++;
  }
  steady = steady_slots > 0 ? steady / steady_slots : 0;
  // The first slot after the flood began whose share is below half the steady share, and the
  // mean share over the flood's last half.
  double moved_s = -1, late_share = 0;
  int late_slots = 0;
  const size_t flood_slots = static_cast<size_t>(FLAGS_after_seconds * 10);
  for (size_t i = flood_slot; i < sampler.shares.size() && i < flood_slot + flood_slots; i++) {
    if (moved_s < 0 && sampler.shares[i] < steady / 2) moved_s = (i - flood_slot + 1) / 10.0;
    if (i >= flood_slot + flood_slots / 2) {
      late_share += sampler.shares[i];
      late_slots++;
    }
  }
  late_share = late_slots > 0 ? late_share / late_slots : 0;
  const bench::LossFigures f = bench::FiguresOfLoss(recorder, flood_at, end, FLAGS_after_seconds);
  const int64_t failed = clients.failed();
  printf(
      "CLUSTER scenario=kv_overload clients=%d concurrency=%d flood_concurrency=%d "
      "adaptive_limit=%d calls=%ld failed=%ld flood_calls=%ld flood_refused=%ld "
      "steady_share=%.3f flood_late_share=%.3f below_half_share_s=%.1f steady_per_sec=%.0f "
      "steady_p99_ms=%.2f flood_p99_ms=%.2f retries=%ld\n",
      FLAGS_clients, FLAGS_concurrency, FLAGS_flood_concurrency, FLAGS_adaptive_limit ? 1 : 0,
      clients.calls(), failed, flood.calls(), flood.failed(), steady, late_share, moved_s,
      f.steady_per_sec, Ms(f.steady.ValueAtPercentile(99)), Ms(f.after.ValueAtPercentile(99)),
      clients.retries());
  printf("CLUSTER scenario=kv_overload share_per_100ms_from_flood=");
  for (size_t i = flood_slot; i < sampler.shares.size(); i++) {
    printf("%s%.2f", i > flood_slot ? "," : "", sampler.shares[i]);
  }
  printf("\n");
  return failed == 0 ? 0 : 1;
}

int Run(const std::string& self_dir, const std::string& dir) {
  const std::string binary =
      FLAGS_server_binary.empty() ? self_dir + "/kv-server" : FLAGS_server_binary;
  const std::string value(static_cast<size_t>(FLAGS_value_bytes), 'v');
  GetCall::expected_value = &value;
  return FLAGS_scenario == "kill" ? RunKill(binary, dir, value) : RunOverload(binary, dir, value);
}

}  // namespace
}  // namespace rrpc::kv

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"kv-cluster-bench [--clients=N] [--concurrency=N] [--steady_seconds=S] "
       "[--after_seconds=S] [--scenario=kill|overload]",
       "Reads from three kv-server processes through a list:// cluster channel while one is "
       "SIGKILLed (failed reads, p99 before and after, time back to 60% throughput) or flooded "
       "(its share of the channels' attempts, failed reads) (docs/cluster.md).",
       {"kv/kv_cluster_bench_main.cc"}});
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_clients < 1 || FLAGS_concurrency < 1 || FLAGS_keys < 1 || FLAGS_steady_seconds <= 1 ||
      FLAGS_after_seconds <= 0 || FLAGS_flood_concurrency < 1 ||
      (FLAGS_scenario != "kill" && FLAGS_scenario != "overload")) {
    fprintf(stderr,
            "kv-cluster-bench: --clients, --concurrency, --keys, --flood_concurrency and "
            "--after_seconds must be positive, --steady_seconds above 1, --scenario kill or "
            "overload\n");
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
