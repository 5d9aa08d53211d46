// cluster-bench: the timed figures of a cluster channel (docs/cluster.md, issue 25). Clients
// (--clients, each its own messenger and channel with --concurrency echo calls in flight, every
// answer checked) call three servers; one scenario or all of them:
//   kill:     three `rpc-bench --server_only` processes; one is SIGKILLed after --steady_seconds.
//             p99 of the steady window (its first second is warm-up) and of the --after_seconds
//             after the kill, seconds until throughput is back to >= 60% of the steady rate (per
//             100 ms), calls failed, retries against the retry budget.
//   hedge:    three in-process servers; one delays 5% of its calls by 50 ms (fault injection).
//             p99 of the healthy cluster, of the slowed one without hedging, and with hedging
//             after the healthy p95, in --hedge_rounds alternating rounds; extra calls; then
//             that replica made 10x slower (every call delayed by 10x the healthy p50): its
//             share of calls second by second.
//   registry: four in-process servers, three named by a file and, separately, by a private etcd;
//             the fourth added (seconds until it answers a call) and removed (seconds until no
//             channel can pick it any more), --registry_rounds times each.
//   drop:     three servers in network namespaces; one's packets dropped (cluster_bench_drop.cc).
// Prints one "CLUSTER scenario=..." line per figure. One process drives everything; the machine
// it runs on shares its cores with the servers, so compare figures of one run.
#include <fcntl.h>
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/cluster_bench_drop.h"
#include "bench/cluster_bench_load.h"
#include "bench/echo_only_service.h"
#include "rpc/core/fault_injection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/discovery/etcd-test-util.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/command_line.h"
#include "rrpc/util/monotime.h"
#include "util/countdown_latch.h"
#include "util/histogram.h"

extern char** environ;

DEFINE_string(scenario, "all", "kill, hedge, registry, drop or all");
DEFINE_int32(clients, 2, "Client messengers, each with its own channel");
DEFINE_int32(concurrency, 64, "Echo calls in flight per client");
DEFINE_double(steady_seconds, 5,
              "kill, drop: seconds of load before the kill or cut (the first is warm-up)");
DEFINE_double(after_seconds, 10, "kill, drop: seconds measured after the kill or cut");
DEFINE_string(server_binary, "",
              "kill: the rpc-bench binary started as the --server_only servers; empty: the "
              "rpc-bench next to this binary");
DEFINE_double(hedge_seconds, 2, "hedge: seconds of each phase (the first half second is warm-up)");
DEFINE_int32(hedge_rounds, 3, "hedge: rounds of the healthy, slowed and hedged phases");
DEFINE_int32(registry_rounds, 5, "registry: additions and removals per registry");

namespace rrpc::bench {
namespace {

// ---------------------------------------------------------------------------------------------
// kill

uint16_t FreePort() {
  auto probe = rpc::MessengerBuilder("port-probe").Build().value();
  Sockaddr bound;
  RRPC_CHECK_OK(probe->Listen(Sockaddr::Loopback(0), &bound));
  probe->Shutdown();
  return bound.port();
}

// Waits (up to 30 s) until an echo to `addr` is answered.
bool WaitUntilServing(const Sockaddr& addr) {
  auto m = rpc::MessengerBuilder("probe").Build().value();
  BenchServiceProxy proxy(m, addr);
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  bool ok = false;
  while (!ok && MonoTime::Now() < deadline) {
    BenchRequestPB req;
    req.set_payload("x");
    BenchResponsePB resp;
    rpc::RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(1));
    ok = proxy.Echo(req, &resp, &ctl).ok();
    if (!ok) SleepFor(MonoDelta::FromMilliseconds(20));
  }
  m->Shutdown();
  return ok;
}

int RunKill(const std::string& self_dir) {
  const std::string binary =
      FLAGS_server_binary.empty() ? self_dir + "/rpc-bench" : FLAGS_server_binary;
  std::vector<pid_t> pids;
  std::string target = "list://";
  for (int i = 0; i < 3; i++) {
    const uint16_t port = FreePort();
    std::vector<std::string> args = {binary, "--server_only", "--port=" + std::to_string(port),
                                     "--bind_host=127.0.0.1"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      fprintf(stderr, "cluster-bench: cannot start %s: %s\n", binary.c_str(), strerror(rc));
      return 1;
    }
    pids.push_back(pid);
    if (!WaitUntilServing(Sockaddr::Loopback(port))) {
      fprintf(stderr, "cluster-bench: %s --port=%u does not answer\n", binary.c_str(), port);
      return 1;
    }
    target += (i > 0 ? "," : "") + Sockaddr::Loopback(port).ToString();
  }
  const double total = FLAGS_steady_seconds + FLAGS_after_seconds;
  Recorder recorder(static_cast<size_t>(total * 400'000));
  rpc::ChannelOptions options;
  Clients clients(FLAGS_clients, target, options, FLAGS_concurrency, &recorder);
  clients.Start();
  SleepFor(MonoDelta::FromSeconds(FLAGS_steady_seconds));
  const double kill_at = recorder.Elapsed();
  kill(pids[1], SIGKILL);
  SleepFor(MonoDelta::FromSeconds(FLAGS_after_seconds));
  const double end = recorder.Elapsed();
  clients.Stop();
  for (size_t i = 0; i < pids.size(); i++) {
    if (i != 1) kill(pids[i], SIGTERM);
    waitpid(pids[i], nullptr, 0);
  }

  const LossFigures f = FiguresOfLoss(recorder, kill_at, end, FLAGS_after_seconds);
  int64_t budget = 0, refused = 0;
  const double seconds = end;
  for (const auto& l : clients.loads()) {
    const auto& rb = l->channel()->options().retry_budget;
    budget += rb.max_tokens + static_cast<int64_t>(rb.ratio * l->calls()) +
              static_cast<int64_t>(rb.floor_per_second * (seconds + 1));
    refused += l->channel()->retries_refused();
  }
  printf(
      "CLUSTER scenario=kill clients=%d concurrency=%d calls=%ld failed=%ld steady_per_sec=%.0f "
      "steady_p50_ms=%.2f steady_p99_ms=%.2f after_kill_p99_ms=%.2f after_kill_p999_ms=%.2f "
      "after_kill_max_ms=%.2f p99_ratio=%.2f lowest_100ms_share=%.2f "
      "back_to_60pct_s=%.1f last_below_60pct_s=%.1f retries=%ld retry_budget=%ld "
      "retries_refused=%ld\n",
      FLAGS_clients, FLAGS_concurrency, clients.Sum(&Load::calls), clients.Sum(&Load::failed),
      f.steady_per_sec, Ms(f.steady.ValueAtPercentile(50)), Ms(f.steady.ValueAtPercentile(99)),
      Ms(f.after.ValueAtPercentile(99)), Ms(f.after.ValueAtPercentile(99.9)), Ms(f.after.max()),
      double(f.after.ValueAtPercentile(99)) / std::max<uint64_t>(1, f.steady.ValueAtPercentile(99)),
      f.lowest_share, f.back_to_60pct_s, f.last_below_60pct_s, clients.Sum(&Load::extra_attempts),
      budget, refused);
  printf("CLUSTER scenario=kill per_second_after_kill=");
  PrintCounts(f.per_second_after);
  return clients.Sum(&Load::failed) == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// In-process servers (hedge, registry)

class CountingEcho final : public EchoOnlyService {
 public:
  void Echo(const BenchRequestPB* req, BenchResponsePB* resp, rpc::RpcContext* ctx) override {
    calls_.fetch_add(1, std::memory_order_relaxed);
    resp->set_payload(req->payload());
    ctx->RespondSuccess();
  }
  int64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> calls_{0};
};

struct Server {
  std::shared_ptr<rpc::Messenger> messenger;
  CountingEcho* service = nullptr;
  Sockaddr addr;
  std::shared_ptr<rpc::FaultInjector> faults = std::make_shared<rpc::FaultInjector>();
};

std::vector<Server> StartServers(int n) {
  std::vector<Server> servers(n);
  for (int i = 0; i < n; i++) {
    rpc::MessengerOptions mo;
    mo.name = "server" + std::to_string(i);
    mo.service_queue_length = 1024;
    rpc::MessengerBuilder builder(mo);
    rpc::MessengerInternals::SetFaultInjector(&builder, servers[i].faults);
    servers[i].messenger = builder.Build().value();
    auto service = std::make_unique<CountingEcho>();
    servers[i].service = service.get();
    RRPC_CHECK_OK(servers[i].messenger->RegisterService(std::move(service)));
    RRPC_CHECK_OK(servers[i].messenger->Listen(Sockaddr::Loopback(0), &servers[i].addr));
  }
  return servers;
}

std::string ListTarget(const std::vector<Server>& servers, int n) {
  std::string target = "list://";
  for (int i = 0; i < n; i++) target += (i > 0 ? "," : "") + servers[i].addr.ToString();
  return target;
}

// ---------------------------------------------------------------------------------------------
// hedge

struct PhaseFigures {
  Histogram latency{60'000'000};
  int64_t calls = 0;
  int64_t extra = 0;
  int64_t failed = 0;
};

PhaseFigures RunPhase(const std::string& target, const rpc::ChannelOptions& options) {
  Recorder recorder(static_cast<size_t>(FLAGS_hedge_seconds * 400'000));
  Clients clients(FLAGS_clients, target, options, FLAGS_concurrency, &recorder);
  clients.Start();
  SleepFor(MonoDelta::FromSeconds(FLAGS_hedge_seconds));
  clients.Stop();
  PhaseFigures f;
  f.latency = recorder.Window(0.5, 1e9);
  f.calls = clients.Sum(&Load::calls);
  f.extra = clients.Sum(&Load::extra_attempts);
  f.failed = clients.Sum(&Load::failed);
  return f;
}

void PrintPhase(const char* phase, const PhaseFigures& f) {
  printf(
      "CLUSTER scenario=hedge phase=%s calls=%ld failed=%ld p50_ms=%.2f p99_ms=%.2f "
      "p999_ms=%.2f extra_calls_pct=%.2f\n",
      phase, f.calls, f.failed, Ms(f.latency.ValueAtPercentile(50)),
      Ms(f.latency.ValueAtPercentile(99)), Ms(f.latency.ValueAtPercentile(99.9)),
      f.calls ? 100.0 * f.extra / f.calls : 0.0);
}

int RunHedge() {
  std::vector<Server> servers = StartServers(3);
  const std::string target = ListTarget(servers, 3);
  rpc::FaultSpec slow;
  slow.slow_handler = 0.05;
  slow.handler_delay = MonoDelta::FromMilliseconds(50);
  // The three phases alternate round by round, so a busy spell of the machine hits all alike;
  // the summary takes each phase's median over the rounds.
  std::vector<double> healthy_p99, slowed_p99, hedged_p99, extra_pct;
  Histogram healthy_all(60'000'000);
  int64_t failed = 0;
  for (int round = 0; round < FLAGS_hedge_rounds; round++) {
    servers[0].faults->set_spec(rpc::FaultSpec());
    const PhaseFigures healthy = RunPhase(target, rpc::ChannelOptions());
    PrintPhase("healthy", healthy);
    healthy_all.Merge(healthy.latency);
    servers[0].faults->set_spec(slow);
    const PhaseFigures slowed = RunPhase(target, rpc::ChannelOptions());
    PrintPhase("slowed_no_hedging", slowed);
    rpc::ChannelOptions hedging;
    hedging.hedge_after =
        MonoDelta::FromMicroseconds(std::max<int64_t>(100, healthy.latency.ValueAtPercentile(95)));
    const PhaseFigures hedged = RunPhase(target, hedging);
    PrintPhase("slowed_hedged", hedged);
    printf("CLUSTER scenario=hedge round=%d hedge_after_ms=%.2f\n", round,
           hedging.hedge_after.ToSeconds() * 1000);
    healthy_p99.push_back(Ms(healthy.latency.ValueAtPercentile(99)));
    slowed_p99.push_back(Ms(slowed.latency.ValueAtPercentile(99)));
    hedged_p99.push_back(Ms(hedged.latency.ValueAtPercentile(99)));
    extra_pct.push_back(hedged.calls ? 100.0 * hedged.extra / hedged.calls : 0.0);
    failed += healthy.failed + slowed.failed + hedged.failed;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  printf(
      "CLUSTER scenario=hedge rounds=%d healthy_p99_ms=%.2f slowed_p99_ms=%.2f "
      "hedged_p99_ms=%.2f hedged_p99_vs_healthy=%.2f unhedged_p99_vs_healthy=%.2f "
      "extra_calls_pct=%.2f (medians over the rounds) failed=%ld\n",
      FLAGS_hedge_rounds, median(healthy_p99), median(slowed_p99), median(hedged_p99),
      median(hedged_p99) / median(healthy_p99), median(slowed_p99) / median(healthy_p99),
      median(extra_pct), failed);

  // Every call of replica 0 takes 10x the healthy median longer.
  rpc::FaultSpec ten_x;
  ten_x.slow_handler = 1;
  ten_x.handler_delay =
      MonoDelta::FromMicroseconds(std::max<int64_t>(1000, 10 * healthy_all.ValueAtPercentile(50)));
  servers[0].faults->set_spec(ten_x);
  Clients clients(FLAGS_clients, target, rpc::ChannelOptions(), FLAGS_concurrency, nullptr);
  std::vector<int64_t> before;
  for (const auto& s : servers) before.push_back(s.service->calls());
  clients.Start();
  printf("CLUSTER scenario=hedge phase=ten_x_slower delay_ms=%.2f slow_share_per_second=",
         ten_x.handler_delay.ToSeconds() * 1000);
  for (int second = 0; second < 5; second++) {
    SleepFor(MonoDelta::FromSeconds(1));
    std::vector<int64_t> now;
    int64_t all = 0;
    for (const auto& s : servers) {
      now.push_back(s.service->calls());
      all += now.back() - before[now.size() - 1];
    }
    printf("%s%.3f", second > 0 ? "," : "", all ? double(now[0] - before[0]) / all : 0.0);
    before = now;
  }
  printf("\n");
  clients.Stop();
  for (auto& s : servers) s.messenger->Shutdown();
  return failed == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// registry

bool ChannelsHave(const Clients& clients, const Sockaddr& addr, bool want) {
  for (const auto& l : clients.loads()) {
    bool has = false;
    for (const auto& b : l->channel()->Backends()) has |= b.addr == addr;
    if (has != want) return false;
  }
  return true;
}

// Names the fourth server in the registry (name_fourth(true)) and takes it out again
// (name_fourth(false)), --registry_rounds times, under a load of --clients x 16 calls.
int RunRegistry(const char* name, const std::string& target, std::vector<Server>& servers,
                const std::function<void(bool)>& name_fourth) {
  Clients clients(FLAGS_clients, target, rpc::ChannelOptions(), 16, nullptr);
  const MonoTime wait_until = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (!ChannelsHave(clients, servers[0].addr, true) && MonoTime::Now() < wait_until) {
    SleepFor(MonoDelta::FromMilliseconds(5));
  }
  clients.Start();
  std::vector<double> adds, removes;
  for (int round = 0; round < FLAGS_registry_rounds; round++) {
    const int64_t before = servers[3].service->calls();
    MonoTime t0 = MonoTime::Now();
    name_fourth(true);
    while (servers[3].service->calls() == before &&
           MonoTime::Now() - t0 < MonoDelta::FromSeconds(30)) {
      SleepFor(MonoDelta::FromMicroseconds(500));
    }
    adds.push_back((MonoTime::Now() - t0).ToSeconds());
    SleepFor(MonoDelta::FromMilliseconds(300));
    t0 = MonoTime::Now();
    name_fourth(false);
    while (!ChannelsHave(clients, servers[3].addr, false) &&
           MonoTime::Now() - t0 < MonoDelta::FromSeconds(30)) {
      SleepFor(MonoDelta::FromMicroseconds(500));
    }
    removes.push_back((MonoTime::Now() - t0).ToSeconds());
    SleepFor(MonoDelta::FromMilliseconds(300));
  }
  clients.Stop();
  std::sort(adds.begin(), adds.end());
  std::sort(removes.begin(), removes.end());
  printf(
      "CLUSTER scenario=registry registry=%s rounds=%zu add_to_first_call_s_median=%.3f "
      "add_max=%.3f remove_to_out_of_every_set_s_median=%.3f remove_max=%.3f calls=%ld "
      "failed=%ld\n",
      name, adds.size(), adds[adds.size() / 2], adds.back(), removes[removes.size() / 2],
      removes.back(), clients.Sum(&Load::calls), clients.Sum(&Load::failed));
  return clients.Sum(&Load::failed) == 0 ? 0 : 1;
}

int RunRegistries() {
  std::vector<Server> servers = StartServers(4);
  int rc = 0;
  {
    char tmpl[] = "/tmp/cluster-bench-XXXXXX";
    CHECK(mkdtemp(tmpl) != nullptr);
    const std::string path = std::string(tmpl) + "/servers";
    auto write = [&](bool with_fourth) {
      std::string text;
      for (int i = 0; i < (with_fourth ? 4 : 3); i++) text += servers[i].addr.ToString() + "\n";
      std::ofstream(path + ".tmp", std::ios::trunc) << text;
      CHECK_EQ(0, rename((path + ".tmp").c_str(), path.c_str()));
    };
    write(false);
    rc |= RunRegistry("file", "file://" + path, servers, write);
    std::filesystem::remove_all(tmpl);
  }
  {
    rpc::EtcdTestServer etcd;
    RRPC_CHECK_OK(etcd.Start());
    rpc::EtcdClient registry = etcd.Client();
    for (int i = 0; i < 3; i++) {
      RRPC_CHECK_OK(
          registry.Put("/kv/" + servers[i].addr.ToString(), servers[i].addr.ToString(), 0));
    }
    const std::string key = "/kv/" + servers[3].addr.ToString();
    rc |= RunRegistry("etcd", "etcd://" + etcd.endpoint() + "/kv", servers, [&](bool with_fourth) {
      RRPC_CHECK_OK(with_fourth ? registry.Put(key, servers[3].addr.ToString(), 0)
                                : registry.Delete(key));
    });
  }
  for (auto& s : servers) s.messenger->Shutdown();
  return rc;
}

int Main(const std::string& self_dir) {
  const std::string& s = FLAGS_scenario;
  if (s != "all" && s != "kill" && s != "hedge" && s != "registry" && s != "drop") {
    fprintf(stderr, "cluster-bench: --scenario must be kill, hedge, registry, drop or all\n");
    return 2;
  }
  int rc = 0;
  if (s == "all" || s == "kill") rc |= RunKill(self_dir);
  if (s == "all" || s == "hedge") rc |= RunHedge();
  if (s == "all" || s == "registry") rc |= RunRegistries();
  if (s == "all" || s == "drop") {
    rc |= RunDrop(FLAGS_clients, FLAGS_concurrency, FLAGS_steady_seconds, FLAGS_after_seconds);
  }
  return rc;
}

}  // namespace
}  // namespace rrpc::bench

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"cluster-bench [--scenario=kill|hedge|registry|drop|all] [--clients=N] [--concurrency=N]",
       "Timed figures of a cluster channel: a server SIGKILLed under load, a slowed replica with "
       "and without hedging, servers added to and removed from a file and an etcd registry "
       "(docs/cluster.md); a server's packets dropped (network namespaces, root).",
       {"bench/cluster_bench_main.cc", "bench/cluster_bench_drop.cc"}});
  google::InitGoogleLogging(argv[0]);
  const std::string self_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  return rrpc::bench::Main(self_dir);
}
